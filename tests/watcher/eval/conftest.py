"""Fixtures of the evaluation tests: the real `compactd` command as a subprocess."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest


@pytest.fixture(scope="session")
def compactd() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run `compactd ARGS...` (``python -m watcher``): its exit code, stdout and stderr."""

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "watcher", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)

    return run
