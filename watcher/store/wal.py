"""The WAL checkpointer: a thread with its own connection, so that copying the WAL into the
database (and its fsyncs) happens off the daemon's event loop."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from typing import Final

# The WAL is checkpointed by a thread with its own connection once it holds this much (SQLite's own
# automatic checkpoint, 1000 pages, would run inside whichever commit crosses it: on the event loop)
WAL_CHECKPOINT_BYTES: Final = 4 << 20
WAL_INLINE_FACTOR: Final = 4  # the thread fell this far behind: the commit checkpoints (as SQLite would)
CHECKPOINT_TRIES: Final = 5
CHECKPOINT_RETRY_S: Final = 0.02
# how long a deferrable writer (the search indexer) holds back its next write while a checkpoint is
# due, for the checkpoint to complete without its commits coming in between
ROOM_WAIT_S: Final = 0.25
# ... and while the WAL is over the inline bound: the daemon's own next commit checkpoints inline,
# which completes only if this writer holds back meanwhile (a safety valve, not a pace)
ROOM_WAIT_OVER_S: Final = 2.0


def second_connection(path: str, synchronous: str) -> sqlite3.Connection | None:
    """A connection of a store thread's own (the checkpointer's, the search indexer's) at the
    daemon's ``synchronous`` level; None if it cannot be had."""
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=5.0)
    except sqlite3.Error:
        return None
    try:
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    except sqlite3.Error:
        conn.close()
        return None
    return conn


def checkpointed_by_thread(conn: sqlite3.Connection) -> bool:
    """Set a writing connection up for :class:`Checkpointer`: no automatic checkpoint inside its
    commits, and the WAL file truncated when a commit of this connection restarts it after a
    complete checkpoint, so that the file's size is what was written since (poke). Without the
    latter a restart by this connection would keep the file at its largest size, and every commit
    after it would find the WAL "due". False if the settings could not be made."""
    try:
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute("PRAGMA journal_size_limit = 0")
    except sqlite3.Error:
        return False
    return True


class Checkpointer:
    """Checkpoints the WAL from a thread with a connection of its own, once a commit finds the WAL
    has grown past :data:`WAL_CHECKPOINT_BYTES`. SQLite's automatic checkpoint (off on the
    daemon's connection while this runs) would copy the pages, and fsync the WAL and the database
    at level ``normal``, inside the commit that crosses the limit: 10-30 ms on the event loop.

    Nothing about durability changes: commits go to the WAL as before, and a checkpoint (PASSIVE:
    it never waits for the daemon's connection, nor makes it wait) syncs as the daemon's level
    says (the same ``PRAGMA synchronous``); the WAL restarts only after a complete checkpoint."""

    def __init__(self, db: sqlite3.Connection, ckpt: sqlite3.Connection, path: str) -> None:
        self.db = db
        self.wal = f"{path}-wal"
        self.runs = 0
        self.failures = 0
        self.inline = 0  # checkpoints the daemon's connection ran itself (poke)
        self.complete = 0  # checkpoints that copied the whole WAL (it restarts on the next commit)
        self.deferred = 0  # writes a deferrable writer held back for a checkpoint (room)
        self._completed = threading.Condition()
        self._ckpt = ckpt
        self._running = threading.Lock()  # held by a checkpoint in progress
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._main, name="compactd-wal-checkpoint", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, db: sqlite3.Connection, path: str, synchronous: str) -> Checkpointer | None:
        """None (SQLite's automatic checkpoints stay on) if the second connection cannot be had."""
        ckpt = second_connection(path, synchronous)
        if ckpt is None:
            return None
        if not checkpointed_by_thread(db):
            ckpt.close()
            return None
        return cls(db, ckpt, path)

    def poke(self) -> None:
        """After a commit (a stat: ~2 µs). Should the thread fall behind (its checkpoint completes
        only if no commit comes while it copies), at WAL_INLINE_FACTOR times the size the daemon's
        connection checkpoints itself, as SQLite's automatic checkpoint would have."""
        self.committed_on(self.db)

    def due(self) -> int:
        """Wake the thread if the WAL has grown past WAL_CHECKPOINT_BYTES; the WAL's size (0 if
        unknown)."""
        try:
            size = os.stat(self.wal).st_size
        except OSError:
            return 0
        if size >= WAL_CHECKPOINT_BYTES:
            self._wake.set()
        return size

    def committed_on(self, conn: sqlite3.Connection) -> None:
        """After a commit on ``conn`` (the daemon's, or the search indexer's, whose inline checkpoint
        then runs off the event loop): :meth:`poke`'s work."""
        if self.due() >= WAL_INLINE_FACTOR * WAL_CHECKPOINT_BYTES:
            with self._running, contextlib.suppress(sqlite3.Error):  # after the thread's checkpoint
                self._checkpointed(*conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone())
                self.inline += 1

    def room(self, timeout_s: float = ROOM_WAIT_S) -> None:
        """Before a write that can wait (the search indexer's, from its thread): while a checkpoint
        is due, hold the write back until one completes, for at most ``timeout_s`` (at least
        ROOM_WAIT_OVER_S once the WAL is over its inline bound). A PASSIVE
        checkpoint completes only if no commit comes while it copies; with two connections writing
        back to back it seldom would, and the WAL would outgrow its inline bound (each restart
        needs a complete checkpoint). An idle daemon does not hold the writer back: with nothing
        else writing, the woken thread's checkpoint completes at once."""
        with self._completed:
            seen = self.complete
        size = self.due()
        if size < WAL_CHECKPOINT_BYTES:
            return
        self.deferred += 1
        if size >= WAL_INLINE_FACTOR * WAL_CHECKPOINT_BYTES:
            timeout_s = max(timeout_s, ROOM_WAIT_OVER_S)
        with self._completed:
            self._completed.wait_for(lambda: self.complete > seen or self._stop, timeout_s)

    def _checkpointed(self, busy: int, log: int, done: int) -> bool:
        """Count a checkpoint's result; whether it was complete."""
        whole = not busy and log == done
        if whole:
            with self._completed:
                self.complete += 1
                self._completed.notify_all()
        return whole

    def _main(self) -> None:
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stop:
                    return
                for _ in range(CHECKPOINT_TRIES):  # until one completes (no commit came meanwhile)
                    try:
                        with self._running:
                            result = self._ckpt.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                        self.runs += 1
                    except sqlite3.Error:
                        self.failures += 1
                        break
                    if self._checkpointed(*result) or self._stop:
                        break
                    time.sleep(CHECKPOINT_RETRY_S)
        finally:
            self._ckpt.close()

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        with self._completed:
            self._completed.notify_all()
        self._thread.join(30)
        with contextlib.suppress(sqlite3.Error):
            self.db.execute("PRAGMA wal_autocheckpoint = 1000")
            self.db.execute("PRAGMA journal_size_limit = -1")
