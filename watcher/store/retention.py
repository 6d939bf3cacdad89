"""Retention: how much of the archive is kept, and what removes archived originals.

Evicted originals leave a tombstone (the archive row, saying when and why); the FTS index loses
their texts with them (the store's triggers keep the texts the index must forget, and its indexer
applies them: watcher.store.fts).
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Final

from watcher.store.database import Database
from watcher.store.records import Evicted

_DAY: Final = 86400.0


class Retention:
    """``[store] retention_days`` and ``max_archive_mb`` (0 = no limit; the server sets them on a
    reload) and the size of what the archive holds (``archived_bytes``, not evicted)."""

    def __init__(self, db: Database, *, days: int = 0, max_archive_mb: int = 0) -> None:
        self._db = db
        self.days = days
        self.max_archive_mb = max_archive_mb
        self.archived_bytes = 0
        self.recount()

    def recount(self) -> None:
        self.archived_bytes = int(
            self._db.scalar("SELECT COALESCE(SUM(bytes), 0) FROM archive WHERE evicted IS NULL")
        )

    def added(self, nbytes: int) -> None:
        """An archive entry of ``nbytes`` was committed: apply the size cap if it is now exceeded."""
        self.archived_bytes += nbytes
        if self.max_archive_mb and self.archived_bytes > self.max_archive_mb * 1024 * 1024:
            self.enforce()

    def enforce(self, now: float | None = None) -> Evicted:
        """Evict archived originals (keeping a tombstone that says when and why):

        1. older than ``days`` (0 = never);
        2. while the archive holds more than ``max_archive_mb`` (0 = no cap): first originals of
           *nacked* proposals (the agent kept them in its context), then the oldest of the rest.

        Never the originals of an open (planned or sent) proposal, nor an entry no proposal refers
        to yet (its job is summarizing; a crash leaves it to boot recovery). Checkpoints are not
        evicted: they are the agent's explicit saves (``drop`` removes them).
        """
        now = self._db.clock() if now is None else now
        by_age = by_size = freed = 0
        with self._db.tx() as db:
            if self.days:
                cutoff = now - self.days * _DAY
                rows = db.execute(
                    "SELECT a.seq, a.bytes FROM archive a LEFT JOIN proposals p ON p.ref = a.ref "
                    "WHERE a.evicted IS NULL AND a.created < ? "
                    "AND COALESCE(p.state, 'planned') NOT IN ('planned', 'sent')",
                    (cutoff,),
                ).fetchall()
                reason = f"older than store.retention_days = {self.days}"
                for seq, size in rows:
                    _evict(db, seq, now, reason)
                    by_age += 1
                    freed += size
            if self.max_archive_mb:
                cap = self.max_archive_mb * 1024 * 1024
                total = int(
                    db.execute(
                        "SELECT COALESCE(SUM(bytes), 0) FROM archive WHERE evicted IS NULL"
                    ).fetchone()[0]
                )
                if total > cap:
                    victims = db.execute(
                        "SELECT a.seq, a.bytes FROM archive a LEFT JOIN proposals p ON p.ref = a.ref "
                        "WHERE a.evicted IS NULL AND COALESCE(p.state, 'planned') NOT IN ('planned', 'sent') "
                        "ORDER BY (COALESCE(p.state, '') = 'nacked') DESC, a.seq"
                    )
                    reason = f"archive over store.max_archive_mb = {self.max_archive_mb}"
                    for seq, size in victims.fetchall():
                        if total <= cap:
                            break
                        _evict(db, seq, now, reason)
                        total -= size
                        by_size += 1
                        freed += size
        if by_age or by_size:
            with contextlib.suppress(sqlite3.Error):
                self._db.conn.execute("PRAGMA incremental_vacuum")
            self.recount()
            self._db.archived()  # (the search index forgets what was evicted)
        return Evicted(by_age, by_size, freed)


def drop_archive_of(db: sqlite3.Connection, proposal: str) -> None:
    """Delete the archive entry of ``proposal`` (one that never left the daemon)."""
    db.execute("DELETE FROM archive WHERE ref = (SELECT ref FROM proposals WHERE proposal = ?)", (proposal,))


def _evict(db: sqlite3.Connection, seq: int, now: float, reason: str) -> None:
    """Remove an entry's originals and what only served them (its settled proposal and digest
    rows); the archive row stays as a tombstone that says when and why."""
    db.execute("DELETE FROM originals WHERE seq = ?", (seq,))
    db.execute("UPDATE archive SET evicted = ?, evict_reason = ? WHERE seq = ?", (now, reason, seq))
    ref = "(SELECT ref FROM archive WHERE seq = ?)"
    db.execute(f"DELETE FROM digests WHERE ref = {ref}", (seq,))
    db.execute(f"DELETE FROM proposals WHERE ref = {ref} AND state NOT IN ('planned', 'sent')", (seq,))
