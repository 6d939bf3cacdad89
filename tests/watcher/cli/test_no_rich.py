"""The daemon's process does not import rich (structlog would, where it is installed, only to
render tracebacks for a terminal); other commands are left as they are."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

PROBE = (
    "import sys; sys.argv = ['compactd', *sys.argv[1:]]; import watcher.cli, structlog; "
    "print(sys.modules.get('rich') is not None)"
)


def loads_rich(*argv: str) -> bool:
    out = subprocess.run(
        [sys.executable, "-P", "-c", PROBE, *argv], capture_output=True, text=True, check=True
    )
    return out.stdout.strip() == "True"


def test_compactd_run_does_not_load_rich_and_logs_plain_tracebacks() -> None:
    assert not loads_rich("run", "--socket", "ipc:///nonexistent")
    probe = (
        "import sys; sys.argv = ['compactd', 'run']; import watcher.cli, structlog.dev as d; "
        "print(d.ConsoleRenderer(colors=False)._exception_formatter is d.plain_traceback)"
    )
    out = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


@pytest.mark.skipif(importlib.util.find_spec("rich") is None, reason="rich is not installed here")
def test_other_commands_leave_rich_to_structlog() -> None:
    assert loads_rich("status")
