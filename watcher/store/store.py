"""The durable store: one SQLite file (WAL) in the state directory, as a database object and
small repositories.

What it holds, per agent identity (and session), and who answers for it:

* ``store.agents`` (watcher.store.agents) — ``agents``, ``sessions``: who attached, how, when.
* ``store.archive`` (watcher.store.archive) — ``archive`` + ``originals``: every section a proposal
  replaces, archived *before* the proposal leaves the daemon, checksummed; search over an FTS5
  index (watcher.store.search).
* ``store.proposals`` (watcher.store.proposals) — ``proposals`` and their ``digests``, the state
  machine ``planned → sent → acked | nacked | expired``.
* ``store.checkpoints`` (watcher.store.checkpoints) — an agent's whole context at version V.
* ``store.retention`` (watcher.store.retention) — the size and age limits, eviction.
* ``store.ids`` (watcher.store.ids) — the numbers of refs, proposal ids and digest ids.
* ``store.database`` (watcher.store.database) — the connection, lock, transactions, WAL
  checkpointer (watcher.store.wal) and schema migrations (watcher.store.schema).

Scope: every read takes the caller's agent identity and filters on it in SQL. There is no query
that returns another agent's rows; the daemon passes the *authenticated* identity (watcher.serve.auth).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from watcher.store.agents import Agents
from watcher.store.archive import Archive, ArchiveView
from watcher.store.checkpoints import Checkpoints
from watcher.store.codec import ArchiveRows, archive_rows, section_digest
from watcher.store.database import SYNCHRONOUS_LEVELS, Database, check_integrity, connect_readonly
from watcher.store.ids import Ids
from watcher.store.proposals import OPEN_STATES, STATES, TRANSITIONS, Proposals, expire
from watcher.store.records import (
    ArchiveEntry,
    BootReport,
    CheckpointMeta,
    CorruptError,
    Evicted,
    Hit,
    Recalled,
    StoredProposal,
    StoreError,
    TransitionError,
)
from watcher.store.retention import Retention, drop_archive_of
from watcher.store.schema import MIGRATIONS, SCHEMA_VERSION, migrate
from watcher.store.wal import WAL_CHECKPOINT_BYTES, WAL_INLINE_FACTOR

__all__ = [
    "DB_NAME",
    "MIGRATIONS",
    "OPEN_STATES",
    "SCHEMA_VERSION",
    "STATES",
    "SYNCHRONOUS_LEVELS",
    "TRANSITIONS",
    "WAL_CHECKPOINT_BYTES",
    "WAL_INLINE_FACTOR",
    "ArchiveEntry",
    "ArchiveRows",
    "ArchiveView",
    "BootReport",
    "CheckpointMeta",
    "CorruptError",
    "Evicted",
    "Hit",
    "Recalled",
    "Store",
    "StoreError",
    "StoredProposal",
    "TransitionError",
    "archive_rows",
    "check_integrity",
    "connect_readonly",
    "migrate",
    "section_digest",
]

DB_NAME: Final = "compactd.db"
COUNTS_TTL_S: Final = 1.0  # how old stats()'s counts may be: STATUS is asked many times a second under load


class Store:
    """The database and its repositories (``store.archive.put(...)``, ``store.proposals.record(...)``)."""

    def __init__(self, database: Database, *, retention_days: int = 0, max_archive_mb: int = 0) -> None:
        self.database = database
        self.retention = Retention(database, days=retention_days, max_archive_mb=max_archive_mb)
        self.agents = Agents(database)
        self.archive = Archive(database, self.retention)
        self.proposals = Proposals(database, self.retention)
        self.checkpoints = Checkpoints(database)
        self.ids = Ids(database)
        self._counted: tuple[float, dict[str, Any]] | None = None  # (when, stats()'s counts)
        self._schema = database.schema_version  # (migrated before: it does not change while open)

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        synchronous: str = "normal",
        retention_days: int = 0,
        max_archive_mb: int = 0,
        integrity_check: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> Store:
        """Open (creating it if needed), check and migrate the store file; StoreError if unusable
        (watcher.store.database.Database.open: the file is locked while open)."""
        database = Database.open(path, synchronous=synchronous, integrity_check=integrity_check, clock=clock)
        return cls(database, retention_days=retention_days, max_archive_mb=max_archive_mb)

    @classmethod
    def readonly(cls, path: str | Path) -> Store:
        """A read-only view of a store file (tools; the daemon may be running or not)."""
        return cls(Database.readonly(path))

    @classmethod
    def memory(cls) -> Store:
        """A throwaway store (tests, embedders without a state directory)."""
        return cls(Database.memory())

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):  # (a store that failed keeps its gap: no repeat)
            self.ids.give_back()
        self.database.close()

    @property
    def db(self) -> sqlite3.Connection:
        return self.database.conn

    @property
    def path(self) -> str:
        return self.database.path

    @property
    def schema_version(self) -> int:
        return self.database.schema_version

    def integrity(self) -> list[str]:
        """PRAGMA integrity_check; [] when the database is sound."""
        return self.database.integrity()

    def sync_wal(self) -> None:
        """Make every commit so far durable against power loss (watcher.store.database.Database.sync_wal)."""
        self.database.sync_wal()

    def recover(self) -> BootReport:
        """After a start (clean or kill -9): proposals still ``planned`` never left the daemon, so
        they expire and their archive rows go; archive entries no proposal refers to were written
        by a job the crash interrupted (during summarization) and go too. ``sent`` ones stay open
        until their agent resumes (watcher.serve.recovery.reconcile) or they age out. The numbers
        of what is removed are not handed out again (the ids counter goes past them first)."""
        self.ids.reserve_stored()
        now = self.database.clock()
        with self.database.tx() as db:
            planned = [r[0] for r in db.execute("SELECT proposal FROM proposals WHERE state = 'planned'")]
            for pid in planned:
                drop_archive_of(db, pid)
                expire(db, pid, now, "restart before it was sent")
            orphans = db.execute(
                "DELETE FROM archive WHERE evicted IS NULL AND ref NOT IN (SELECT ref FROM proposals)"
            ).rowcount
            sent = int(db.execute("SELECT COUNT(*) FROM proposals WHERE state = 'sent'").fetchone()[0])
        self.retention.recount()
        self.database.archived()
        return BootReport(len(planned), orphans, sent)

    def stats(self) -> dict[str, Any]:
        """STATUS's ``store``: the archive's counts and the index's lag (at most COUNTS_TTL_S old:
        ``counts_age_s``) and what the store's threads have done (current)."""
        now = time.monotonic()
        if self._counted is None or now - self._counted[0] >= COUNTS_TTL_S:
            self._counted = (now, self._counts())
        at, counts = self._counted
        return {
            "path": self.path,
            "schema": self._schema,
            "synchronous": self.database.synchronous,
            "archived_bytes": int(self.retention.archived_bytes),
            **counts,
            "counts_age_s": round(now - at, 3),
            **self.database.background(),
        }

    def _counts(self) -> dict[str, Any]:
        """Each a scan of its table (O(rows)): an agent asking STATUS many times a second under
        load made them a measurable share of the serving loop's time (docs/BENCHMARKS.md, stop 33)."""
        scalar = self.database.scalar
        return {
            "archive_entries": int(scalar("SELECT COUNT(*) FROM archive WHERE evicted IS NULL")),
            "evicted_entries": int(scalar("SELECT COUNT(*) FROM archive WHERE evicted IS NOT NULL")),
            "checkpoints": int(scalar("SELECT COUNT(*) FROM checkpoints")),
            "proposals": self.proposals.counts(),
            "file_bytes": int(scalar("PRAGMA page_size")) * int(scalar("PRAGMA page_count")),
            "index_pending_rows": self.database.pending_rows(),
        }
