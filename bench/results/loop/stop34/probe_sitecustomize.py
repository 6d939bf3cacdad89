"""Put first on PYTHONPATH, as ``sitecustomize.py`` in a directory of its own, for a load bench
(stop 34): in the daemon (``watcher run --socket ...``) it records the main thread's schedstat
(seconds on a CPU, seconds runnable but waiting for one), every Python thread's by name (sampled
each 0.5 s), a histogram of the loop's callbacks in ms, and the callbacks over 0.5 ms by their
task's coroutine; written to ``/tmp/prof/probe-PID.json`` at exit."""

from __future__ import annotations

import sys

if "run" in sys.argv and any("--socket" in a for a in sys.argv):
    import asyncio.events as ev
    import atexit
    import collections
    import json
    import os
    import threading
    import time
    from pathlib import Path
    from typing import Any

    total: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    long: collections.Counter[str] = collections.Counter()
    hist: collections.Counter[int] = collections.Counter()
    orig = ev.Handle._run
    main_tid = threading.get_native_id()

    def name(handle: Any) -> str:
        task = getattr(handle._callback, "__self__", None)
        if task is None or not hasattr(task, "get_coro"):
            return str(getattr(handle._callback, "__qualname__", repr(handle._callback)))[:80]
        coro = task.get_coro()
        inner = coro
        while (nxt := getattr(inner, "cr_await", None)) is not None and hasattr(nxt, "cr_frame"):
            inner = nxt
        return f"{getattr(coro, '__qualname__', coro)} @ {getattr(inner, '__qualname__', '?')}"

    def _run(self: Any) -> None:
        t = time.perf_counter()
        try:
            orig(self)
        finally:
            d = time.perf_counter() - t
            hist[min(int(d * 1000), 100)] += 1
            if d > 0.0005:
                n = name(self)
                total[n] += d
                count[n] += 1
                if d > 0.01:
                    long[n] += 1

    ev.Handle._run = _run  # type: ignore[method-assign]

    def sched(tid: int) -> list[int] | None:
        try:
            return [int(x) for x in Path(f"/proc/self/task/{tid}/schedstat").read_text().split()]
        except OSError:
            return None

    start = {"main": sched(main_tid), "t": time.monotonic()}
    seen: dict[int, tuple[str, list[int]]] = {}

    def sampler() -> None:
        while True:
            time.sleep(0.5)
            for th in threading.enumerate():
                st = sched(th.native_id) if th.native_id else None
                if st and th.native_id:
                    seen[th.native_id] = (th.name, st)

    threading.Thread(target=sampler, daemon=True, name="probe-sampler").start()

    def _dump() -> None:
        run: collections.Counter[str] = collections.Counter()
        wait: collections.Counter[str] = collections.Counter()
        for thread_name, st in seen.values():
            key = thread_name.rstrip("0123456789_")
            run[key] += st[0] / 1e9
            wait[key] += st[1] / 1e9
        out = {
            "py_threads_run_s": run.most_common(),
            "py_threads_wait_s": wait.most_common(),
            "main_start": start["main"],
            "main_end": sched(main_tid),
            "wall_s": time.monotonic() - start["t"],
            "callback_ms_hist": sorted(hist.items()),
            "total": total.most_common(30),
            "count": {k: count[k] for k, _ in total.most_common(30)},
            "over10ms": long.most_common(20),
        }
        Path(f"/tmp/prof/probe-{os.getpid()}.json").write_text(json.dumps(out, indent=1))

    atexit.register(_dump)
