"""The WAL checkpoints of test_store's back-to-back fill: each checkpoint's (busy, frames in the
log, frames copied), the checkpointer's counters and the largest WAL. Run from the repo's root:
.venv/bin/python bench/results/wal/probe.py [noindexer]; load the machine beside it to see the
checkpoint starvation (docs/BENCHMARKS.md, "The test suite's time")."""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, ".")
import watcher.store.wal as walmod
from tests.watcher.store.test_store import DB_NAME, fill
from watcher.store.store import Store

results = []
orig = walmod.Checkpointer._checkpointed


def spy(self, busy, log, done):
    results.append((busy, log, done))
    return orig(self, busy, log, done)


walmod.Checkpointer._checkpointed = spy
d = Path(tempfile.mkdtemp())
store = Store.open(d / DB_NAME)
if len(sys.argv) > 1:
    store.database.indexer.close()
    store.database.indexer = None
fill(store, range(120), 0.02)
results.clear()
b = fill(store, range(120, 370), 0.0)
c = store.database.checkpointer
print(
    "biggest MB", b / 1e6, "inline", c.inline, "complete", c.complete, "runs", c.runs, "deferred", c.deferred
)
from collections import Counter

print(Counter((r[0], r[1] == r[2]) for r in results))
print(results[:10])
store.close()
