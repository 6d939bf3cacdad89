"""A serving loop's C calls while another Python thread is busy (stop 34): one SQLite transaction
(BEGIN, INSERT, COMMIT: three calls that release the GIL) on the main thread, alone and beside a
thread that runs Python without pause, at the daemon's 1 ms switch interval. Each release hands the
GIL to the busy thread, and the main thread waits up to a switch interval to have it back.

Usage: .venv/bin/python bench/results/loop/stop34/gil_convoy.py [SWITCH_INTERVAL_S]   (~5 s, idle machine)
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path


def transactions(db: sqlite3.Connection, n: int = 2000) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        db.execute("BEGIN")
        db.execute("INSERT INTO t VALUES (?)", (i,))
        db.execute("COMMIT")
        out.append(time.perf_counter() - t)
    return sorted(out)


def report(label: str, ts: list[float]) -> None:
    us = [round(x * 1e6) for x in (statistics.fmean(ts), ts[len(ts) // 2], ts[int(len(ts) * 0.99)])]
    print(f"{label}: mean {us[0]} us, p50 {us[1]} us, p99 {us[2]} us")


def main() -> None:
    sys.setswitchinterval(float(sys.argv[1]) if len(sys.argv) > 1 else 0.001)
    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite3.connect(Path(tmp) / "t.db", isolation_level=None)
        db.execute("PRAGMA journal_mode = wal")
        db.execute("PRAGMA synchronous = normal")
        db.execute("CREATE TABLE t (x)")
        report("alone", transactions(db))
        stop = threading.Event()

        def busy() -> None:
            x = 0
            while not stop.is_set():
                x += 1

        th = threading.Thread(target=busy)
        th.start()
        try:
            report("beside a busy Python thread", transactions(db))
        finally:
            stop.set()
            th.join()
        db.close()


if __name__ == "__main__":
    main()
