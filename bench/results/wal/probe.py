"""The WAL checkpoints of test_store's back-to-back fill: each checkpoint's (busy, frames in the
log, frames copied), the checkpointer's counters and the largest WAL. Run from the repo's root:
PYTHONPATH=. .venv/bin/python bench/results/wal/probe.py [noindexer]; load the machine beside it
(two `python3 -c "while 1: pass"`) to see the checkpoint starvation (docs/BENCHMARKS.md, "The test
suite's time")."""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

import watcher.store.wal as walmod
from tests.watcher.store.test_store import DB_NAME, fill
from watcher.store.store import Store

results: list[tuple[int, int, int]] = []
_original = walmod.Checkpointer._checkpointed


def _spy(self: walmod.Checkpointer, busy: int, log: int, done: int) -> bool:
    results.append((busy, log, done))
    return _original(self, busy, log, done)


def main() -> None:
    walmod.Checkpointer._checkpointed = _spy  # type: ignore[method-assign]
    store = Store.open(Path(tempfile.mkdtemp()) / DB_NAME)
    if len(sys.argv) > 1 and sys.argv[1] == "noindexer" and store.database.indexer is not None:
        store.database.indexer.close()
        store.database.indexer = None
    fill(store, range(120), 0.02)
    results.clear()
    biggest = fill(store, range(120, 370), 0.0)
    c = store.database.checkpointer
    assert c is not None
    print(f"biggest WAL {biggest / 1e6:.1f} MB; inline {c.inline}, complete {c.complete}, runs {c.runs}")
    print("(busy, complete):", dict(Counter((busy, log == done) for busy, log, done in results)))
    print("first results (busy, log, done):", results[:10])
    store.close()


if __name__ == "__main__":
    main()
