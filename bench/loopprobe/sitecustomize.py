"""A diagnostic, not part of compactd: which event-loop callbacks run long, in a daemon under load.

Put this folder first on PYTHONPATH and set LOOPPROBE_OUT=PREFIX; every Python process started
with it (the bench client and the daemon it starts) appends to PREFIX.<role>.<pid> one line per
asyncio callback that ran over 15 ms: when, its wall time, its thread's CPU time in it (wall much
above CPU: the thread waited, for the GIL, a lock or a core), and the task's name and coroutine.

    LOOPPROBE_OUT=/tmp/lp PYTHONPATH=bench/loopprobe:. .venv/bin/compactd bench load ...
"""

from __future__ import annotations

import os
import sys
import time

_OUT = os.environ.get("LOOPPROBE_OUT")
_LONG_S = 0.015

if _OUT:
    import asyncio.events

    _role = "daemon" if "run" in sys.argv else "client"
    _log = open(f"{_OUT}.{_role}.{os.getpid()}", "a", buffering=1)  # noqa: SIM115 - lives with the process
    _orig = asyncio.events.Handle._run

    def _run(self: asyncio.events.Handle) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            _orig(self)
        finally:
            wall = time.perf_counter() - t0
            if wall > _LONG_S:
                task = getattr(getattr(self, "_callback", None), "__self__", None)
                name = ""
                if isinstance(task, asyncio.Task):
                    name = f"{task.get_name()} {task.get_coro().__qualname__}"  # type: ignore[union-attr]
                cpu = (time.thread_time() - c0) * 1000
                at = time.monotonic()
                _log.write(f"{at:.3f} wall={wall * 1000:.1f} cpu={cpu:.1f} {name} {self!r:.120}\n")

    asyncio.events.Handle._run = _run  # type: ignore[method-assign]
