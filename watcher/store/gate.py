"""Who writes next to the store: the daemon's event loop before the search indexer's thread.

Both write to one SQLite file, and SQLite lets one connection write at a time. A connection that
finds the write lock held polls for it (the busy handler): it sleeps 1, 2, 5, 10, 15 ... ms between
tries, and the indexer, with a backlog, started its next slice as soon as it had committed one, so
the loop's next try usually found the lock held again. At 1 600 agents the loop's
``BEGIN IMMEDIATE`` waited 14 s in a 45 s run: 1 310 of 13 676 transactions over 1 ms, p99
23.5 ms, up to 111 ms (docs/BENCHMARKS.md, "Stop 31").

With the gate both sides hold one Python lock around their write transactions: a waiting loop is
woken the moment a slice commits (not at its next poll), and the indexer starts no slice while the
loop waits. The loop thus waited at most for the one slice being written (SLICE_BYTES: ~3 ms, ~7 ms
on two saturated cores; ~10 s of 45 at 1 600 agents). Since schema v4 the index is written in a
file of its own (watcher.store.fts) and the indexer's one write to the store per slice is a
statement that updates its marks (µs): the gate now orders those.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Final

YIELD_S: Final = 0.0002  # how often the indexer looks again while the loop waits for the gate


class WriteGate:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = threading.Lock()  # guards _waiting
        self._waiting = 0  # writers of the first rank waiting for the gate
        self.waits = 0  # first-rank writers that found the gate held
        self.waited_s = 0.0  # ... and how long they waited in all

    @contextlib.contextmanager
    def first(self) -> Iterator[None]:
        """The daemon's writes: wait only for a slice being written."""
        if not self._lock.acquire(blocking=False):
            with self._count:
                self._waiting += 1
            t0 = time.perf_counter()
            try:
                self._lock.acquire()
            finally:
                with self._count:
                    self._waiting -= 1
            self.waits += 1
            self.waited_s += time.perf_counter() - t0
        try:
            yield
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def after(self) -> Iterator[None]:
        """The indexer's writes: none starts while a first-rank writer waits."""
        while True:
            while self._waiting:
                time.sleep(YIELD_S)
            self._lock.acquire()
            if not self._waiting:
                break
            self._lock.release()  # one came meanwhile: it goes first
        try:
            yield
        finally:
            self._lock.release()
