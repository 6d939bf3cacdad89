"""Diagnosis only (stop 55): times every asyncio callback of each Python process started with this
directory on PYTHONPATH and SLOWCB_OUT set (copy it as sitecustomize.py); at exit, writes
SLOWCB_OUT.PID: a histogram by whole milliseconds and the slowest callbacks (> 8 ms) with the task
they stepped. Not part of the product.

    mkdir /tmp/slowcb && cp slowcb_sitecustomize.py /tmp/slowcb/sitecustomize.py
    SLOWCB_OUT=/tmp/slowcb/out PYTHONPATH=/tmp/slowcb .venv/bin/compactd bench load --trajectories ... \\
        --no-model --agents 1600 --max-agents 1600 --seconds 60 --seed 3 --json /tmp/l.json
"""

from __future__ import annotations

import asyncio.events
import atexit
import collections
import json
import os
import time
from typing import Any

SLOW_MS = 8.0


def _name(handle: asyncio.events.Handle) -> str:
    cb: Any = handle._callback  # (a diagnosis reads asyncio's internals)
    name = str(getattr(cb, "__qualname__", repr(cb)))
    task = getattr(cb, "__self__", None)
    if task is not None and hasattr(task, "get_coro"):
        coro = task.get_coro()
        frame = getattr(coro, "cr_frame", None)
        where = f"@ {frame.f_code.co_filename.split('/')[-1]}:{frame.f_lineno}" if frame else "done"
        name = f"task {coro.__qualname__} {where}"
    return name


def install(out: str) -> None:
    run = asyncio.events.Handle._run
    slow: list[tuple[float, str]] = []
    hist: collections.Counter[int] = collections.Counter()

    def timed(self: asyncio.events.Handle) -> None:
        t0 = time.perf_counter()
        run(self)
        ms = (time.perf_counter() - t0) * 1000
        hist[int(ms)] += 1
        if ms > SLOW_MS:
            slow.append((round(ms, 1), _name(self)))

    def dump() -> None:
        if len(hist) >= 3:  # a process that ran a loop
            with open(f"{out}.{os.getpid()}", "w") as f:
                json.dump({"hist": sorted(hist.items()), "slow": sorted(slow, reverse=True)[:300]}, f)

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]
    atexit.register(dump)


if os.environ.get("SLOWCB_OUT"):
    install(os.environ["SLOWCB_OUT"])
