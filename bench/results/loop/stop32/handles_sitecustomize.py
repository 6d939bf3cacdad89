"""Put first on PYTHONPATH, as ``sitecustomize.py`` in a directory of its own, for a load bench: in
the daemon (``watcher run --socket ...``) it times every event-loop callback over 0.5 ms, named by
its task's coroutine and the coroutine it suspended in, and writes the totals and the callbacks
over 20 ms to ``/tmp/prof/handles-PID.json`` at exit."""

from __future__ import annotations

import sys

if "run" in sys.argv and any("--socket" in a for a in sys.argv):
    import asyncio.events as ev
    import atexit
    import collections
    import json
    import os
    import time
    from pathlib import Path
    from typing import Any

    total: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    long: collections.Counter[str] = collections.Counter()
    long_s: collections.Counter[str] = collections.Counter()
    orig = ev.Handle._run

    def name(handle: Any) -> str:
        task = getattr(handle._callback, "__self__", None)
        if task is None or not hasattr(task, "get_coro"):
            return str(getattr(handle._callback, "__qualname__", repr(handle._callback)))[:80]
        coro = task.get_coro()
        inner = coro
        while (nxt := getattr(inner, "cr_await", None)) is not None and hasattr(nxt, "cr_frame"):
            inner = nxt  # the innermost coroutine awaited: where the step ended
        return f"{getattr(coro, '__qualname__', coro)} @ {getattr(inner, '__qualname__', '?')}"

    def _run(self: Any) -> None:
        t = time.perf_counter()
        try:
            orig(self)
        finally:
            d = time.perf_counter() - t
            if d > 0.0005:
                n = name(self)
                total[n] += d
                count[n] += 1
                if d > 0.02:
                    long[n] += 1
                    long_s[n] += d

    ev.Handle._run = _run  # type: ignore[method-assign]

    def _dump() -> None:
        out = {
            "total": total.most_common(25),
            "count": {k: count[k] for k, _ in total.most_common(25)},
            "over20ms": long.most_common(25),
            "over20ms_s": long_s.most_common(25),
        }
        Path(f"/tmp/prof/handles-{os.getpid()}.json").write_text(json.dumps(out, indent=1))

    atexit.register(_dump)
