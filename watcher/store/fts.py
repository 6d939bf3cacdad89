"""The archive's search index, kept up to date off the event loop.

FTS5's trigram tokenizer indexes every position of a text: ~40 µs per KB here (a 600 KB tool
output, 25 ms). Until schema v3 a trigger indexed each archived text inside the archive's insert,
on the daemon's event loop, and under load that was the largest share of the loop's long stalls
(400 agents: 150 of the 157 callbacks over 15 ms in a minute, the ingest p99 over its goal;
docs/BENCHMARKS.md).

Since v3 an archive insert writes only the rows (~1 ms for 600 KB); the index follows:

* :func:`index_slice` indexes the next rows in ``(seq, pos)`` order, at most :data:`SLICE_BYTES`
  of text (one row at least), by moving the mark of the last row indexed (``fts_indexed``)
  forward: a trigger indexes the rows it passes, in the same statement and transaction, so the
  mark and the index never disagree, crash or not, and the write lock is held only while SQLite
  works (the GIL released);
* :class:`Indexer` runs it from a thread with its own connection (sqlite3 releases the GIL while
  SQLite works), woken after each archive insert; the daemon's connection waits for its write
  lock for at most one slice (~3 ms); while a WAL checkpoint is due, a slice waits for one to
  complete (bounded: watcher.store.wal.Checkpointer.room) so that the WAL keeps its bound;
* search reads the index for the rows up to the mark and scans the rows after it
  (watcher.store.search): an entry is found the moment it is committed, indexed or not;
* deleting a row removes it from the index only if it was indexed (the v3 triggers' WHEN).

Archive seqs are AUTOINCREMENT and rows are never inserted under an existing seq, so a row
committed after the mark always sorts after it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable
from typing import Final

from watcher.store.gate import WriteGate
from watcher.store.schema import register_functions
from watcher.store.wal import Checkpointer, checkpointed_by_thread, second_connection

SLICE_BYTES: Final = 64 << 10  # bytes of text indexed per transaction (at least one row)
SLICE_ROWS: Final = 256
RETRY_S: Final = 1.0  # after an error (the database busy past its timeout): try again this much later

_SIZES: Final = (
    "SELECT seq, pos, length(CAST(text AS BLOB)) FROM originals "
    "WHERE (seq, pos) > (SELECT seq, pos FROM fts_indexed) ORDER BY seq, pos LIMIT ?"
)


def index_slice(
    conn: sqlite3.Connection,
    max_bytes: int = SLICE_BYTES,
    max_rows: int = SLICE_ROWS,
    before_write: Callable[[], object] = lambda: None,
    gate: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext,
) -> int:
    """Index the next unindexed rows (at most ``max_bytes`` bytes of text, one row at least) on
    ``conn``; the number of rows indexed (0: none was pending).

    The slice is chosen by a read; the write is one statement in autocommit: moving the mark
    (``fts_indexed``) forward, whose trigger (schema v3) indexes the rows it passes. So the write
    lock is taken, the texts indexed and the transaction committed inside one call into SQLite,
    with the GIL released: the daemon's connection waits for SQLite's own work, not for this thread
    to get the GIL back between statements."""
    last: tuple[int, int] | None = None
    rows = size = 0
    for seq, pos, nbytes in conn.execute(_SIZES, (max_rows,)).fetchall():
        if last is not None and size + nbytes > max_bytes:
            break
        last, rows, size = (seq, pos), rows + 1, size + nbytes
    if last is not None:
        before_write()  # (the slice's rows stay pending whatever rows come after them meanwhile)
        with gate():  # (watcher.store.gate: the daemon's own writes go first)
            conn.execute("UPDATE fts_indexed SET seq = ?, pos = ? WHERE one = 1", last)
    return rows


def index_all(conn: sqlite3.Connection) -> int:
    """Index every pending row, slice by slice; the number indexed."""
    total = 0
    while n := index_slice(conn):
        total += n
    return total


def pending_rows(conn: sqlite3.Connection) -> int:
    """Rows not indexed yet."""
    row = conn.execute(
        "SELECT count(*) FROM originals WHERE (seq, pos) > (SELECT seq, pos FROM fts_indexed)"
    ).fetchone()
    return int(row[0])


class Indexer:
    """Indexes archived texts from a thread with a connection of its own (see the module doc)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        checkpointer: Checkpointer | None = None,
        gate: WriteGate | None = None,
    ) -> None:
        self.rows = 0  # indexed by this thread
        self._gate = gate or WriteGate()  # shared with the daemon's connection (Database.tx)
        self.slices = 0
        self.failures = 0
        self._conn = conn
        self._checkpointer = checkpointer  # consulted before and told after each slice
        self._wake = threading.Event()
        self._state = threading.Condition()
        self._asked = 0  # pokes so far
        self._done = 0  # the pokes whose rows are indexed
        self._stop = False
        self._thread = threading.Thread(target=self._main, name="compactd-fts-indexer", daemon=True)
        self._thread.start()
        self.poke()  # rows a crash left unindexed

    @classmethod
    def start(
        cls,
        path: str,
        synchronous: str,
        checkpointer: Checkpointer | None = None,
        gate: WriteGate | None = None,
    ) -> Indexer | None:
        """None if the second connection cannot be had (the caller then indexes inline). Where the
        WAL is checkpointed by a thread (``checkpointer``), this connection's commits are set up
        as the daemon's are (watcher.store.wal.checkpointed_by_thread); a slice waits while a
        checkpoint is due (Checkpointer.room: the index can wait, the WAL's bound cannot) and
        tells the checkpointer of its commit."""
        conn = second_connection(path, synchronous)
        if conn is None:
            return None
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            register_functions(conn)
        except sqlite3.Error:
            conn.close()
            return None
        if checkpointer is not None and not checkpointed_by_thread(conn):
            conn.close()
            return None
        return cls(conn, checkpointer, gate)

    def _slice(self) -> int:
        """One slice, after the WAL has room for it; the rows indexed."""
        ckpt = self._checkpointer
        n = index_slice(
            self._conn, before_write=ckpt.room if ckpt is not None else lambda: None, gate=self._gate.after
        )
        if n and ckpt is not None:
            ckpt.committed_on(self._conn)
        return n

    def poke(self) -> None:
        """After an archive insert: index it soon."""
        with self._state:
            self._asked += 1
        self._wake.set()

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until every row archived before this call is indexed; False on timeout."""
        with self._state:
            want = self._asked
            return self._state.wait_for(lambda: self._done >= want, timeout_s)

    def _main(self) -> None:
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stop:
                    return
                with self._state:
                    asked = self._asked
                try:
                    while not self._stop and (n := self._slice()):
                        self.rows += n
                        self.slices += 1
                except sqlite3.Error:
                    self.failures += 1
                    self._wake.wait(RETRY_S)  # a poke or close cuts it short
                    self._wake.set()
                    continue
                with self._state:
                    self._done = max(self._done, asked)
                    self._state.notify_all()
        finally:
            self._conn.close()

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(30)
