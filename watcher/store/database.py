"""The database: one SQLite file (WAL) in the state directory, its lock, its transactions.

Durability: WAL mode; ``PRAGMA synchronous`` from ``[store] synchronous`` (see docs/BENCHMARKS.md,
"Store and crash recovery", for the measurement behind the default). A kill -9 loses no committed
transaction at any level but ``off``; power loss can lose the last commits below ``full``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from watcher.store import fts
from watcher.store.fts import Indexer, index_all, pending_rows
from watcher.store.gate import WriteGate
from watcher.store.records import CorruptError, StoreError
from watcher.store.schema import migrate
from watcher.store.wal import Checkpointer

SYNCHRONOUS_LEVELS: Final = ("off", "normal", "full", "extra")
MAX_AGENT_EPOCHS: Final = 4096  # agents whose archive changes are told apart (then: all changed)


class Database:
    """One connection, used from the daemon's event loop (every call is short and synchronous)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        *,
        synchronous: str = "normal",
        lock_fd: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.conn = conn
        self.path = path
        self.synchronous = synchronous
        self.clock = clock
        self.lock_fd = lock_fd
        self.checkpointer: Checkpointer | None = None  # (open(): the WAL is checkpointed off the loop)
        self.indexer: Indexer | None = None  # (open(): archived texts are indexed off the loop)
        self.gate = WriteGate()  # this connection's transactions before the indexer's (watcher.store.gate)
        self.index_inline = False  # no indexer thread could be had: archived() indexes (memory())
        # what archived() was told, for counts read often (watcher.store.archive.Archive.sections):
        # the epoch moves when any agent's archived rows may have changed, an agent's own count when
        # only its rows did
        self.archive_epoch = 0
        self.agent_epochs: dict[str, int] = {}
        # search's connection: the store as main and its index attached as fts (watcher.store.fts);
        # the daemon's own connection (conn) never attaches it: its BEGIN IMMEDIATE would lock both
        self.search: sqlite3.Connection = conn
        self.commits = 0
        self.syncs = 0
        self.sync_points = True  # fsync the points of no return at level normal (see tx)
        # search reads the index (v4: a file of its own) for the rows up to fts_mark and scans the
        # rest; without one (a read-only view of an older file, or no index file) it scans all
        self.indexed = False
        self.fts_mark = self.scalar("SELECT 1 FROM sqlite_master WHERE name = 'fts_mark'") == 1

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        synchronous: str = "normal",
        integrity_check: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> Database:
        """Open (creating it 0600 if needed) and migrate the database; StoreError if unusable.

        Takes an exclusive lock on ``PATH.lock``: two daemons on one state directory would write
        one archive at once. ``integrity_check`` runs PRAGMA integrity_check and refuses a damaged
        file (the archive is the one thing compactd promises to keep).
        """
        if synchronous not in SYNCHRONOUS_LEVELS:
            raise StoreError(f"store.synchronous must be one of {', '.join(SYNCHRONOUS_LEVELS)}")
        p = Path(path)
        lock_fd = _lock(p)
        try:
            if not p.exists():
                os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o600))
            conn = _connect(str(p), synchronous)
            try:
                if integrity_check:
                    problems = check_integrity(conn)
                    if problems:
                        raise CorruptError(
                            f"{p}: PRAGMA integrity_check failed: {'; '.join(problems[:5])}. "
                            "Stop compactd, keep a copy of the file, and restore it from a backup "
                            "(or move it away to start with an empty archive)"
                        )
                migrate(conn, str(p))
                db = cls(conn, str(p), synchronous=synchronous, lock_fd=lock_fd, clock=clock)
                db.checkpointer = Checkpointer.start(conn, str(p), synchronous)
                db.indexer = Indexer.start(str(p), synchronous, db.checkpointer, db.gate)
                search = _search_connection(str(p)) if db.indexer is not None else None
                if search is not None:  # (else search scans: correct, slower)
                    db.search, db.indexed = search, True
            except BaseException:
                conn.close()
                raise
        except sqlite3.DatabaseError as exc:
            os.close(lock_fd)
            raise StoreError(f"{p}: not a usable SQLite database: {exc}") from exc
        except BaseException:
            os.close(lock_fd)
            raise
        return db

    @classmethod
    def readonly(cls, path: str | Path) -> Database:
        """A read-only view of a store file (tools; the daemon may be running or not): search reads
        its index where the index file is there and is this store's."""
        db = cls(connect_readonly(path), str(path))
        db.indexed = db.fts_mark and _attach_readonly(db.conn, str(path))
        return db

    @classmethod
    def memory(cls, clock: Callable[[], float] = time.time) -> Database:
        """A throwaway database (tests, embedders without a state directory)."""
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn, ":memory:")
        fts.attach(conn, ":memory:")  # a second connection cannot see this database: one for all
        fts.prepare(conn, "normal")
        fts.reconcile(conn)
        db = cls(conn, ":memory:", clock=clock)
        db.index_inline = db.indexed = True
        return db

    def archived(self, agent: str | None = None) -> None:
        """After a transaction that inserted or deleted archived rows commits: the search index
        follows (new texts indexed, deleted ones forgotten), from the indexer's thread, or here and
        now where there can be none (an in-memory database). Rows left
        unindexed (a crash, a stopped indexer) are found by search all the same, and indexed by
        the next daemon's indexer. ``agent``: only that agent's rows changed (None: any agent's
        may have)."""
        if agent is None or len(self.agent_epochs) >= MAX_AGENT_EPOCHS:
            self.archive_epoch += 1
            self.agent_epochs.clear()
        else:
            self.agent_epochs[agent] = self.agent_epochs.get(agent, 0) + 1
        if self.indexer is not None:
            self.indexer.poke()
        elif self.index_inline:
            index_all(self.conn)

    def wait_indexed(self, timeout_s: float = 30.0) -> bool:
        """Block until every text archived so far is in the search index (tests, tools)."""
        return self.indexer is None or self.indexer.wait_idle(timeout_s)

    def close(self) -> None:
        if self.indexer is not None:
            self.indexer.close()
            self.indexer = None
        if self.search is not self.conn:
            self.search.close()
        if self.checkpointer is not None:
            self.checkpointer.close()
            self.checkpointer = None
        with contextlib.suppress(sqlite3.Error):
            self.conn.execute("PRAGMA optimize")
        self.conn.close()
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    @property
    def wal_checkpoints(self) -> int:
        """Checkpoints the WAL thread has run (0 where SQLite's automatic checkpoints are on)."""
        return self.checkpointer.runs if self.checkpointer is not None else 0

    def pending_rows(self) -> int:
        """Archived rows search does not find in the index yet (a count: O(those rows))."""
        return pending_rows(self.conn) if self.fts_mark else 0

    def background(self) -> dict[str, int | float]:
        """What the store's threads have done (STATUS; the index's lag: pending_rows)."""
        ckpt, indexer = self.checkpointer, self.indexer
        return {
            "indexed_rows": indexer.rows if indexer is not None else 0,
            "index_checkpoints": indexer.checkpoints if indexer is not None else 0,
            "index_failures": indexer.failures if indexer is not None else 0,
            "wal_checkpoints": ckpt.runs if ckpt is not None else 0,
            "wal_checkpoints_complete": ckpt.complete if ckpt is not None else 0,
            "wal_checkpoints_inline": ckpt.inline if ckpt is not None else 0,
            "wal_checkpoint_failures": ckpt.failures if ckpt is not None else 0,
            "index_writes_deferred": ckpt.deferred if ckpt is not None else 0,
            "write_gate_waits": self.gate.waits,
            "write_gate_waited_s": round(self.gate.waited_s, 3),
        }

    @property
    def schema_version(self) -> int:
        return int(self.scalar("PRAGMA user_version"))

    def integrity(self) -> list[str]:
        """PRAGMA integrity_check; [] when the database is sound."""
        return check_integrity(self.conn)

    def scalar(self, sql: str, *args: Any) -> Any:
        row = self.conn.execute(sql, args).fetchone()
        return row[0] if row else None

    @contextlib.contextmanager
    def tx(self, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One transaction. ``durable`` (a checkpoint save): at level ``normal`` this commit alone
        is fsynced, as under ``full``; in WAL mode that makes every earlier commit durable too."""
        sync = durable and self.sync_points and self.synchronous == "normal"
        if sync:
            self.conn.execute("PRAGMA synchronous = FULL")
        try:
            with self.gate.first():
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self.conn
                except BaseException:
                    self.conn.execute("ROLLBACK")
                    raise
                self.conn.execute("COMMIT")
        finally:
            if sync:
                self.conn.execute("PRAGMA synchronous = NORMAL")
        self.commits += 1
        if self.checkpointer is not None:
            self.checkpointer.poke()

    def sync_wal(self) -> None:
        """Make every commit so far durable against power loss: fsync the WAL file. At level
        ``normal`` the server calls this (in a thread, off the event loop) after marking a
        proposal sent and before sending it; commits are written to the WAL (in the OS's cache)
        before they return, so one fsync covers the archive and the proposal. A no-op at ``off``
        (by choice) and at ``full``/``extra`` (every commit is already synced)."""
        if self.synchronous != "normal" or not self.sync_points or self.path == ":memory:":
            return
        try:
            fd = os.open(f"{self.path}-wal", os.O_RDONLY)
        except FileNotFoundError:
            return  # no WAL: everything is in the database file (a checkpoint synced it)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.syncs += 1


def _lock(p: Path) -> int:
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(f"{p}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(
            f"{p} is in use by another compactd (lock {p}.lock is held); give each daemon its own --state-dir"
        ) from None
    return fd


def _connect(path: str, synchronous: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=5.0)
    if os.path.getsize(path) == 0:  # a new file: only before its first page is written
        db.execute("PRAGMA auto_vacuum = INCREMENTAL")
    mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        db.close()
        raise StoreError(f"{path}: cannot switch to WAL journal mode (got {mode!r})")
    db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    db.execute("PRAGMA foreign_keys = ON")
    return db


def connect_readonly(path: str | Path) -> sqlite3.Connection:
    """A read-only connection for tools (``compactd recall``, the crash benchmark)."""
    p = Path(path)
    if not p.is_file():
        raise StoreError(f"no store at {p}")
    try:
        db = sqlite3.connect(f"file:{p}?mode=ro", uri=True, isolation_level=None, timeout=5.0)
        db.execute("SELECT 1 FROM meta LIMIT 1")
    except sqlite3.Error as exc:
        raise StoreError(f"{p}: cannot read the store: {exc}") from exc
    return db


def _search_connection(path: str) -> sqlite3.Connection | None:
    """A connection for search, on the daemon's thread: it only reads, so it holds no lock. None
    if it cannot be had."""
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=5.0)
    except sqlite3.Error:
        return None
    try:
        fts.attach(conn, fts.index_path(path))
    except sqlite3.Error:
        conn.close()
        return None
    return conn


def _attach_readonly(conn: sqlite3.Connection, path: str) -> bool:
    """Attach the index file of ``path`` read-only, if it is there and indexes this store."""
    index = fts.index_path(path)
    if not os.path.isfile(index):
        return False
    try:
        fts.attach(conn, f"file:{index}?mode=ro")
        row = conn.execute("SELECT store FROM fts.mark").fetchone()
        if row is not None and row[0] == conn.execute("SELECT index_id FROM fts_mark").fetchone()[0]:
            return True
        conn.execute("DETACH DATABASE fts")
    except sqlite3.Error:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("DETACH DATABASE fts")
    return False


def check_integrity(db: sqlite3.Connection) -> list[str]:
    rows = [str(r[0]) for r in db.execute("PRAGMA integrity_check")]
    return [] if rows == ["ok"] else rows
