"""watcher.store.gate on real threads and a real store file: the daemon's transactions wait only
for the indexer's slice being written, and the indexer starts no slice while they wait."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from ipc.sections import Section
from watcher.store.gate import WriteGate
from watcher.store.store import DB_NAME, Store


def test_a_waiting_first_rank_writer_goes_before_the_next_slice() -> None:
    gate = WriteGate()
    order: list[str] = []
    slice_held, release_slice = threading.Event(), threading.Event()

    def indexer() -> None:
        with gate.after():
            order.append("slice 1")
            slice_held.set()
            release_slice.wait(5)
        with gate.after():  # asked for while the loop waits: after it
            order.append("slice 2")

    thread = threading.Thread(target=indexer)
    thread.start()
    assert slice_held.wait(5)
    waiter = threading.Thread(target=lambda: _first(gate, order))
    waiter.start()
    deadline = time.monotonic() + 5
    while not gate._waiting and time.monotonic() < deadline:  # the loop is waiting now
        time.sleep(0.001)
    release_slice.set()
    waiter.join(5)
    thread.join(5)
    assert order == ["slice 1", "loop", "slice 2"]
    assert gate.waits == 1 and gate.waited_s > 0


def _first(gate: WriteGate, order: list[str]) -> None:
    with gate.first():
        order.append("loop")


def test_the_store_and_its_indexer_share_one_gate_and_every_row_is_indexed(tmp_path: Path) -> None:
    store = Store.open(tmp_path / DB_NAME)
    try:
        indexer = store.database.indexer
        assert indexer is not None and indexer._gate is store.database.gate
        big = "Traceback line with a needle\n" * 4000  # ~120 KB: two slices each
        for i in range(30):  # the loop's transactions while the indexer has a backlog
            store.archive.put("a", "default", f"b{i}", (Section(f"t{i}", "tool_result", big + str(i)),))
        assert store.database.wait_indexed()
        hits, _ = store.archive.search("a", "a needle", limit=100)
        assert len(hits) == 30 and indexer.failures == 0
    finally:
        store.close()
