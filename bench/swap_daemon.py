"""Run this tree's ``compactd`` (a bench, usually) with the daemon it starts taken from another tree.

A before/after comparison that runs each tree's own bench changes two things at once: the daemon
and the bench's client (its agents, what they apply and check). With this, one client measures
both daemons, so a difference is the daemon's. The other tree must speak the same protocol.

    DAEMON_TREE=/path/to/old/checkout .venv/bin/python bench/swap_daemon.py bench load --no-model ...
"""

from __future__ import annotations

import os
import sys
from typing import Any

from watcher.cli.main import main
from watcher.eval import harness

_init = harness.DaemonProcess.__init__


def _from_other_tree(self: harness.DaemonProcess, *args: Any, **kwargs: Any) -> None:
    kwargs["env"] = {**(kwargs.get("env") or {}), "PYTHONPATH": os.environ["DAEMON_TREE"]}
    _init(self, *args, **kwargs)


if __name__ == "__main__":
    if not os.environ.get("DAEMON_TREE"):
        sys.exit("set DAEMON_TREE to the checkout whose daemon should run")
    harness.DaemonProcess.__init__ = _from_other_tree  # type: ignore[method-assign]
    sys.exit(main(sys.argv[1:]))
