"""The WAL test's workload alone (tests/watcher/store/test_store.py::fill): the WAL's largest size
in each phase, and the checkpointer's counters.

    PYTHONPATH=TREE .venv/bin/python bench/results/loop/stop29/walmax.py
"""

import tempfile
import time
from pathlib import Path

from tests.watcher.store.test_store import fill
from watcher.store.store import DB_NAME, Store

with tempfile.TemporaryDirectory() as d:
    store = Store.open(Path(d) / DB_NAME)
    b1 = fill(store, range(120), 0.02)
    t1 = time.perf_counter()
    b2 = fill(store, range(120, 370), 0.0)
    t2 = time.perf_counter()
    c = store.database.checkpointer
    assert c is not None
    done, held = getattr(c, "complete", "-"), getattr(c, "deferred", "-")
    counts = f"inline={c.inline} complete={done} deferred={held}"
    print(f"gaps {b1 / 2**20:.1f} MB, back-to-back {b2 / 2**20:.1f} MB, b2b {t2 - t1:.2f}s {counts}")
    store.close()
