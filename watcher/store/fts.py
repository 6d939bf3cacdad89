"""The archive's search index: a file of its own beside the store, kept up to date off the event loop.

FTS5's trigram tokenizer indexes every position of a text: ~40 µs per KB here (a 600 KB tool
output, 25 ms). Until schema v3 a trigger indexed each archived text inside the archive's insert,
on the daemon's event loop; v3 moved the indexing to a thread, but the index stayed in the store's
file, and SQLite lets one connection write a file at a time: at twice the knee the daemon's
transactions waited ~10 s of 45 for the indexer's slices (docs/BENCHMARKS.md, stop 32). Since v4 the
index is in ``PATH.fts`` (:func:`index_path`; WAL, as the store), attached as ``fts`` to the
connections that read or write it, so writing it never takes the store's write lock.

What the two files hold, and who writes what:

* the index file: the contentless FTS5 table ``originals_fts`` (trigram, no positions; rowid
  :func:`watcher.store.schema.fts_rowid`) and its mark ``fts.mark``: every originals row up to
  ``(seq, pos)`` is indexed and none after it, the ``fts_gone`` rows applied up to ``gone``, and
  ``store``, the ``index_id`` of the store it indexes. Only the indexer writes it.
* the store: ``fts_mark`` (schema v4): search reads the index for the rows up to ``(seq, pos)``
  and scans the rows after it; no row after ``(upto_seq, upto_pos)`` can be in the index, and a
  row deleted (or its text changed) up to there leaves its text in ``fts_gone`` (triggers): a
  contentless index forgets a row only when told its text.

:func:`index_slice`, one step of the indexer (from its thread, or inline where there is none):

1. *claim*: the store's ``upto`` covers the slice before it is indexed, so that a row of it
   deleted from now on is remembered (done by the previous slice's publication, step 3);
2. *index*, one transaction on the index file only (the store is read, in one snapshot): insert
   the slice's rows as they are in that snapshot; tell the index to forget the ``fts_gone`` rows
   of that snapshot that it holds (those up to its mark before this slice: a row of this slice
   deleted before the snapshot was never inserted); move the index's mark;
3. *publish*, one statement on the store (under the write gate, µs): the store's marks follow the
   index's (``seq, pos`` := what the index holds; the applied ``fts_gone`` rows go), and ``upto``
   claims the next slice.

A crash between the two files' commits leaves the store's marks behind the index's: at the next
open :func:`reconcile` sets them from the index's (an index that is ahead of its store's ``upto``,
or of another store, is rebuilt from nothing). Search is exact at every moment: a row up to the
store's ``(seq, pos)`` is in the index (published after the index's commit; one statement reads
the store's snapshot before the index's), a row after it is scanned. Archive seqs are
AUTOINCREMENT and rows are never inserted under an existing seq, so a row committed after a mark
always sorts after it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Final

from summarizer.engine import lower_thread_priority
from watcher.store.crashpoints import crashpoint
from watcher.store.gate import WriteGate
from watcher.store.schema import fts_rowid, register_functions, statements
from watcher.store.wal import WAL_CHECKPOINT_BYTES, Checkpointer, checkpointed_by_thread, second_connection

SUFFIX: Final = ".fts"
SLICE_BYTES: Final = 64 << 10  # bytes of text indexed per transaction (at least one row)
SLICE_ROWS: Final = 256
RETRY_S: Final = 1.0  # after an error (the database busy past its timeout): try again this much later
# Added to the indexer thread's niceness (Linux: per thread). The index is derived data and search
# scans what it does not hold yet, so under load it is the first work to wait: at niceness 0 its
# trigram inserts took a third of a core at 1 600 agents, beside the serving loop (a CPU of its
# own only when one is idle; docs/BENCHMARKS.md, stop 34). Its SQL runs without the GIL.
INDEX_NICE: Final = 15

_INDEX: Final = """
CREATE TABLE IF NOT EXISTS fts.mark (
    one   INTEGER PRIMARY KEY CHECK (one = 1),
    store TEXT NOT NULL,                -- the index_id of the store this file indexes
    seq   INTEGER NOT NULL,             -- the originals rows up to (seq, pos) are indexed, none after
    pos   INTEGER NOT NULL,
    gone  INTEGER NOT NULL              -- the store's fts_gone rows applied up to this id
);
-- contentless (the text stays in the store only), trigram (substrings of >= 3 characters),
-- detail=none (no positions: a query is the AND of its trigrams, every hit is checked on the text);
-- what it indexes is compactd_fts_text(text): the tokenizer stops at a NUL, so NULs become spaces
CREATE VIRTUAL TABLE IF NOT EXISTS fts.originals_fts USING fts5(
    text, content = '', tokenize = 'trigram', detail = 'none', columnsize = 0
);
"""

_SIZES: Final = (
    "SELECT seq, pos, length(CAST(text AS BLOB)) FROM main.originals "
    "WHERE (seq, pos) > (?, ?) ORDER BY seq, pos LIMIT ?"
)
_TEXT: Final = "CASE WHEN instr(CAST(text AS BLOB), x'00') > 0 THEN compactd_fts_text(text) ELSE text END"
_INSERT: Final = (
    f"INSERT INTO fts.originals_fts(rowid, text) SELECT {fts_rowid()}, {_TEXT} FROM main.originals "
    "WHERE (seq, pos) > (?, ?) AND (seq, pos) <= (?, ?)"
)
_FORGET: Final = (
    f"INSERT INTO fts.originals_fts(originals_fts, rowid, text) SELECT 'delete', {fts_rowid()}, {_TEXT} "
    "FROM main.fts_gone WHERE id > ? AND id <= ? AND (seq, pos) <= (?, ?)"
)
_PUBLISH: Final = (
    "UPDATE main.fts_mark SET seq = ?, pos = ?, upto_seq = ?, upto_pos = ?, gone = ? WHERE one = 1"
)


def index_path(path: str) -> str:
    """The index file of the store file ``path``."""
    return path + SUFFIX


def attach(conn: sqlite3.Connection, target: str) -> None:
    """Attach the index (a file path, ``:memory:``, or a ``file:`` URI on a URI connection) as
    ``fts`` to a connection of the store."""
    conn.execute("ATTACH DATABASE ? AS fts", (target,))


def prepare(conn: sqlite3.Connection, synchronous: str) -> None:
    """Create the index's tables if they are not there (a new file), in WAL mode at the store's
    ``synchronous`` level; register the SQL function the slices call."""
    register_functions(conn)
    if conn.execute("PRAGMA fts.journal_mode = WAL").fetchone()[0] not in ("wal", "memory"):
        raise sqlite3.OperationalError("the search index cannot use WAL journal mode")
    conn.execute(f"PRAGMA fts.synchronous = {synchronous.upper()}")
    conn.execute(f"PRAGMA fts.journal_size_limit = {WAL_CHECKPOINT_BYTES}")
    for statement in statements(_INDEX):
        conn.execute(statement)


def reconcile(conn: sqlite3.Connection) -> bool:
    """At open, before any slice: make the store's marks agree with the index (a crash between the
    two files' commits leaves them behind it). An index that is not this store's, or that holds
    rows past what the store allowed (``upto``: the store was put back, or lost commits), is
    emptied and rebuilt from the archive. True if it was."""
    upto_seq, upto_pos, store_id = conn.execute(
        "SELECT upto_seq, upto_pos, index_id FROM main.fts_mark"
    ).fetchone()
    mark = conn.execute("SELECT store, seq, pos, gone FROM fts.mark").fetchone()
    rebuild = mark is None or mark[0] != store_id or (mark[1], mark[2]) > (upto_seq, upto_pos)
    conn.execute("BEGIN IMMEDIATE")
    try:
        if rebuild:
            gone = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM main.fts_gone").fetchone()[0])
            conn.execute("INSERT INTO fts.originals_fts(originals_fts) VALUES ('delete-all')")
            conn.execute("INSERT OR REPLACE INTO fts.mark VALUES (1, ?, 0, 0, ?)", (store_id, gone))
            conn.execute(_PUBLISH, (0, 0, 0, 0, gone))
        else:
            _, iseq, ipos, gone = mark
            conn.execute(_PUBLISH, (iseq, ipos, iseq, ipos, gone))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return rebuild


def open_index(path: str, synchronous: str) -> sqlite3.Connection | None:
    """The indexer's connection: the store ``path`` as ``main``, its index attached as ``fts``,
    prepared and reconciled; None if it cannot be had."""
    conn = second_connection(path, synchronous)
    if conn is None:
        return None
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        attach(conn, index_path(path))
        prepare(conn, synchronous)
        reconcile(conn)
    except sqlite3.Error:
        conn.close()
        return None
    return conn


def index_slice(
    conn: sqlite3.Connection,
    max_bytes: int = SLICE_BYTES,
    max_rows: int = SLICE_ROWS,
    before_write: Callable[[], object] = lambda: None,
    gate: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext,
) -> int:
    """Index the next rows (at most ``max_bytes`` bytes of text, one row at least) and forget the
    deleted ones, on ``conn`` (the store as ``main``, the index as ``fts``), then publish; the number
    of rows indexed or forgotten (0: none was pending).

    Each slice writes the store once, after the index's commit: the marks of what the index now
    holds and the claim of the next slice (a slice is claimed before it is indexed: only the first,
    or one whose rows changed meanwhile, needs a write of its own). ``before_write`` and ``gate``
    wrap the writes to the store (watcher.store.wal.Checkpointer.room,
    watcher.store.gate.WriteGate.after); the index's own transaction needs neither."""
    seq, pos, gone = conn.execute("SELECT seq, pos, gone FROM fts.mark").fetchone()
    rows, last = _next(conn, seq, pos, max_bytes, max_rows)
    upto = last or (seq, pos)
    stored = conn.execute("SELECT seq, pos, upto_seq, upto_pos, gone FROM main.fts_mark").fetchone()
    if (stored[0], stored[1], stored[4]) != (seq, pos, gone) or (stored[2], stored[3]) < upto:
        _publish(conn, (seq, pos), upto, gone, before_write, gate)
    pending = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM main.fts_gone").fetchone()[0]) > gone
    if last is None and not pending:
        return 0
    conn.execute("BEGIN")  # deferred: it writes the index only, so it takes the index's lock only
    try:
        if last is not None:
            conn.execute(_INSERT, (seq, pos, *upto))
        until = int(conn.execute("SELECT COALESCE(MAX(id), ?) FROM main.fts_gone", (gone,)).fetchone()[0])
        forgot = conn.execute(_FORGET, (gone, until, seq, pos)).rowcount if until > gone else 0
        conn.execute("UPDATE fts.mark SET seq = ?, pos = ?, gone = ? WHERE one = 1", (*upto, until))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    crashpoint("indexed")
    _, after = _next(conn, upto[0], upto[1], max_bytes, max_rows)
    _publish(conn, upto, after or upto, until, before_write, gate)
    return rows + max(forgot, 0) or 1


def _next(
    conn: sqlite3.Connection, seq: int, pos: int, max_bytes: int, max_rows: int
) -> tuple[int, tuple[int, int] | None]:
    """The slice after ``(seq, pos)``: its rows and its last row (None: no row is pending)."""
    last: tuple[int, int] | None = None
    rows = size = 0
    for rseq, rpos, nbytes in conn.execute(_SIZES, (seq, pos, max_rows)).fetchall():
        if last is not None and size + nbytes > max_bytes:
            break
        last, rows, size = (rseq, rpos), rows + 1, size + nbytes
    return rows, last


def _publish(
    conn: sqlite3.Connection,
    done: tuple[int, int],
    upto: tuple[int, int],
    gone: int,
    before_write: Callable[[], object],
    gate: Callable[[], contextlib.AbstractContextManager[object]],
) -> None:
    """One statement on the store (µs): search reads the index up to ``done``; rows deleted up to
    ``upto`` from now on are remembered; the ``fts_gone`` rows up to ``gone`` are applied and go."""
    before_write()
    with gate():  # (watcher.store.gate: the daemon's own writes go first)
        conn.execute(_PUBLISH, (*done, *upto, gone))


def index_all(conn: sqlite3.Connection) -> int:
    """Index every pending row, slice by slice, and publish; the number indexed or forgotten."""
    total = 0
    while n := index_slice(conn):
        total += n
    return total


def pending_rows(conn: sqlite3.Connection) -> int:
    """Rows search does not find in the index yet (it scans them)."""
    row = conn.execute(
        "SELECT count(*) FROM originals WHERE (seq, pos) > (SELECT seq, pos FROM fts_mark)"
    ).fetchone()
    return int(row[0])


class Indexer:
    """Indexes archived texts from a thread with a connection of its own (see the module doc)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        checkpointer: Checkpointer | None = None,
        gate: WriteGate | None = None,
    ) -> None:
        self.rows = 0  # indexed or forgotten by this thread
        self._gate = gate or WriteGate()  # shared with the daemon's connection (Database.tx)
        self.slices = 0
        self.failures = 0
        self.checkpoints = 0  # of the index file's WAL
        self._conn = conn
        self._wal = index_path(path) + "-wal"
        self._checkpointer = checkpointer  # consulted before and told after each write to the store
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
        """None if the connection cannot be had (search then scans what is not indexed). Where the
        store's WAL is checkpointed by a thread (``checkpointer``), this connection's commits to
        the store are set up as the daemon's are (watcher.store.wal.checkpointed_by_thread), and
        it checkpoints the index file's WAL itself."""
        conn = open_index(path, synchronous)
        if conn is None:
            return None
        if checkpointer is not None and not checkpointed_by_thread(conn):
            conn.close()
            return None
        return cls(conn, path, checkpointer, gate)

    def _slice(self) -> int:
        """One slice; the rows indexed or forgotten."""
        ckpt = self._checkpointer
        n = index_slice(
            self._conn, before_write=ckpt.room if ckpt is not None else lambda: None, gate=self._gate.after
        )
        if ckpt is not None:
            ckpt.committed_on(self._conn)
            self._checkpoint_index()
        return n

    def _checkpoint_index(self) -> None:
        """The index file's WAL, past WAL_CHECKPOINT_BYTES (this connection's automatic
        checkpoints are off, for the store's sake): copied back here, off the loop."""
        try:
            if os.stat(self._wal).st_size < WAL_CHECKPOINT_BYTES:
                return
        except OSError:
            return
        self._conn.execute("PRAGMA fts.wal_checkpoint(PASSIVE)").fetchone()
        self.checkpoints += 1

    def poke(self) -> None:
        """After an archive insert or delete: index it soon."""
        with self._state:
            self._asked += 1
        self._wake.set()

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until every row archived before this call is indexed (and published); False on
        timeout."""
        with self._state:
            want = self._asked
            return self._state.wait_for(lambda: self._done >= want, timeout_s)

    def _main(self) -> None:
        lower_thread_priority(INDEX_NICE)
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
