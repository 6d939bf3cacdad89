"""Count SQL statements run on the daemon's main thread, by statement head (probe, not product)."""

import atexit
import collections
import json
import os
import sqlite3
import sys
import threading
import traceback

if ("run" in sys.argv and "--state-dir" in sys.argv) or os.environ.get("SQLPROBE_ALL"):
    counts: collections.Counter[str] = collections.Counter()
    callers: collections.Counter[str] = collections.Counter()
    main = threading.main_thread()
    _connect = sqlite3.connect

    def trace(stmt: str) -> None:
        if threading.current_thread() is not main:
            return
        head = " ".join(stmt.split()[:3])[:60]
        counts[head] += 1
        for fr in reversed(traceback.extract_stack(limit=12)[:-1]):
            if "/watcher/" in fr.filename and "/store/" not in fr.filename:
                callers[f"{fr.filename.split('/watcher/')[-1]}:{fr.name}"] += 1
                break

    def connect(*a, **k):
        c = _connect(*a, **k)
        if threading.current_thread() is main:
            c.set_trace_callback(trace)
        return c

    sqlite3.connect = connect

    @atexit.register
    def dump() -> None:
        with open(f"/tmp/sqlprobe/out-{os.getpid()}.json", "w") as f:
            json.dump({"statements": counts.most_common(40), "callers": callers.most_common(40)}, f, indent=1)
