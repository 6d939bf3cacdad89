"""Put first on PYTHONPATH, as ``sitecustomize.py`` in a directory of its own, for a load bench: in
the daemon (``watcher run --socket ...``) it times each ``Database.tx`` (the write gate's wait with
``BEGIN IMMEDIATE`` as "begin", the body, ``COMMIT``) and writes the distribution to
``/tmp/prof/tx-PID.json`` at exit."""

from __future__ import annotations

import sys

if "run" in sys.argv and any("--socket" in a for a in sys.argv):
    import atexit
    import contextlib
    import json
    import os
    import time
    from collections.abc import Iterator
    from pathlib import Path
    from typing import Any

    import watcher.store.database as dbm

    stats: dict[str, list[float]] = {"begin": [], "commit": [], "body": []}

    @contextlib.contextmanager
    def tx(self: Any, durable: bool = False) -> Iterator[Any]:
        conn = self.conn
        gate = getattr(self, "gate", None)
        cm = gate.first() if gate is not None else contextlib.nullcontext()
        t0 = time.perf_counter()
        with cm:
            conn.execute("BEGIN IMMEDIATE")
            t1 = time.perf_counter()
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            t2 = time.perf_counter()
            conn.execute("COMMIT")
            t3 = time.perf_counter()
        stats["begin"].append(t1 - t0)
        stats["body"].append(t2 - t1)
        stats["commit"].append(t3 - t2)
        self.commits += 1
        if self.checkpointer is not None:
            self.checkpointer.poke()

    dbm.Database.tx = tx  # type: ignore[method-assign,assignment]

    def _dump() -> None:
        out = {}
        for key, values in stats.items():
            v = sorted(values)
            if v:
                out[key] = {
                    "n": len(v),
                    "sum_s": round(sum(v), 3),
                    "p50_ms": round(v[len(v) // 2] * 1000, 3),
                    "p99_ms": round(v[int(len(v) * 0.99)] * 1000, 3),
                    "max_ms": round(v[-1] * 1000, 2),
                    "over_1ms": sum(x > 0.001 for x in v),
                }
        Path(f"/tmp/prof/tx-{os.getpid()}.json").write_text(json.dumps(out, indent=1))

    atexit.register(_dump)
