"""The archive: every section a proposal replaces, archived *before* the proposal leaves the
daemon (``archive`` + ``originals``: exact text, every attribute, a checksum checked on every
read), and :class:`ArchiveView`, one agent's archive as a mapping (what ``AgentState.archive``
holds).

Scope: every read takes the caller's agent identity and filters on it in SQL. There is no query
that returns another agent's rows; the daemon passes the *authenticated* identity (watcher.serve.auth).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any, Final

from ipc.sections import Section
from watcher.store import search as searching
from watcher.store.codec import ArchiveRows, archive_rows, recalled
from watcher.store.database import Database
from watcher.store.records import ArchiveEntry, Hit, Recalled, StoreError
from watcher.store.retention import Retention
from watcher.store.schema import FTS_POS

_ENTRY = (
    "SELECT a.ref, a.agent, a.session, a.created, a.sections, a.tokens, a.bytes, a.evicted, "
    "COALESCE(a.evict_reason, ''), COALESCE(p.state, '') FROM archive a "
    "LEFT JOIN proposals p ON p.ref = a.ref WHERE "
)
_ORIGINALS = "SELECT a.ref, o.session, o.pos, o.section_id, o.kind, o.text, o.attrs, o.sha256 "


MAX_CACHED_COUNTS: Final = 4096  # agents whose archived-section count is kept between changes
# Originals are inserted several rows per statement: each statement is a C call that gives up the
# interpreter lock, and on the event loop, beside a busy Python thread (a plan, the search indexer),
# each such call costs up to a switch interval (~1 ms) to get it back (docs/ARCHITECTURE.md, "The
# serving loop's C calls"). Statements of 2**k rows (k <= MULTI_ROW_LOG2): a region of n sections
# takes popcount(n) statements, and the connection's statement cache holds a handful of them.
MULTI_ROW_LOG2: Final = 6
_INSERT_ROWS: Final = tuple(  # [k]: the statement inserting 2**k rows
    "INSERT INTO originals(seq, pos, agent, session, section_id, kind, text, attrs, sha256) VALUES "
    + ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * (1 << k))
    for k in range(MULTI_ROW_LOG2 + 1)
)


def insert_rows(db: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert ``rows`` into ``originals`` in few statements (MULTI_ROW_LOG2)."""
    at = 0
    for k in range(MULTI_ROW_LOG2, -1, -1):
        size = 1 << k
        while len(rows) - at >= size:
            db.execute(_INSERT_ROWS[k], [v for row in rows[at : at + size] for v in row])
            at += size


class Archive:
    def __init__(self, db: Database, retention: Retention) -> None:
        self._db = db
        self._retention = retention
        # agent -> ((archive epoch, agent's epoch), sections): STATUS shows each agent's count, and
        # a stalled agent asks STATUS once a second (Database.archived says what changed)
        self._sections: dict[str, tuple[tuple[int, int], int]] = {}

    def put(
        self,
        agent: str,
        session: str,
        ref: str,
        originals: Sequence[Section],
        rows: ArchiveRows | None = None,
    ) -> None:
        """Archive ``originals`` under ``ref``; committed (durable) when this returns. ``rows``:
        their :func:`archive_rows`, if computed already (off the event loop: ArchiveView.put)."""
        now = self._db.clock()
        enc = rows if rows is not None else archive_rows(originals)
        if len(enc.rows) >= FTS_POS:
            raise StoreError(f"archive {ref}: {len(enc.rows)} sections in one entry (at most {FTS_POS - 1})")
        with self._db.tx() as db:
            cur = db.execute(
                "INSERT INTO archive(ref, agent, session, created, sections, tokens, bytes) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (ref, agent, session, now, len(enc.rows), enc.tokens, enc.bytes),
            )
            seq = cur.lastrowid
            values = [
                (seq, pos, agent, session, sid, kind, text, attrs, sha)
                for (pos, sid, kind, attrs, sha), text in zip(enc.rows, enc.texts, strict=True)
            ]
            insert_rows(db, values)
        self._db.archived(agent)  # the search index follows, off the loop (watcher.store.fts)
        self._retention.added(enc.bytes)

    def entry(self, agent: str, ref: str) -> ArchiveEntry | None:
        """The archive entry ``ref`` if it belongs to ``agent``; None otherwise (no oracle)."""
        row = self._db.conn.execute(_ENTRY + "a.ref = ? AND a.agent = ?", (ref, agent)).fetchone()
        return ArchiveEntry(*row) if row else None

    def entries(self, agent: str, *, session: str | None = None, limit: int = 100) -> list[ArchiveEntry]:
        sql = _ENTRY + "a.agent = ?"
        args: list[Any] = [agent]
        if session is not None:
            sql += " AND a.session = ?"
            args.append(session)
        sql += " ORDER BY a.seq DESC LIMIT ?"
        args.append(limit)
        return [ArchiveEntry(*r) for r in self._db.conn.execute(sql, args)]

    def originals(self, agent: str, ref: str, *, offset: int = 0, limit: int = -1) -> list[Recalled]:
        """The archived sections of ``ref`` (in order) if it belongs to ``agent``; checksums verified."""
        rows = self._db.conn.execute(
            _ORIGINALS + "FROM archive a JOIN originals o ON o.seq = a.seq "
            "WHERE a.ref = ? AND a.agent = ? ORDER BY o.pos LIMIT ? OFFSET ?",
            (ref, agent, limit, offset),
        )
        return [recalled(r) for r in rows]

    def by_section(self, agent: str, section_id: str) -> list[Recalled]:
        """Archived copies of section ``section_id`` in ``agent``'s scope, newest first. A digest's id
        yields the originals that digest replaced."""
        digest = self._db.conn.execute(
            "SELECT ref FROM digests WHERE agent = ? AND digest_id = ?", (agent, section_id)
        ).fetchone()
        if digest is not None:
            return self.originals(agent, digest[0])
        rows = self._db.conn.execute(
            _ORIGINALS + "FROM originals o JOIN archive a ON a.seq = o.seq "
            "WHERE o.agent = ? AND o.section_id = ? ORDER BY o.seq DESC, o.pos",
            (agent, section_id),
        )
        return [recalled(r) for r in rows]

    def search(
        self,
        agent: str,
        query: str,
        *,
        session: str | None = None,
        offset: int = 0,
        limit: int = 50,
        context_chars: int = 80,
    ) -> tuple[list[Hit], bool]:
        """Archived sections of ``agent`` whose text contains ``query`` (ASCII case-insensitive),
        newest first; returns (hits, more). How: watcher.store.search."""
        needle = searching.ascii_lower(query)
        rows = searching.rows(self._db, agent, needle, session, offset, limit + 1)
        hits = [
            Hit(ref, sess, pos, sid, kind, at, searching.snippet(text, needle, len(query), context_chars))
            for ref, sess, pos, sid, kind, at, text, _seq in rows
        ]
        return hits[:limit], len(hits) > limit

    def drop_unproposed(self, agent: str, ref: str) -> bool:
        """Delete archive entry ``ref`` if no proposal refers to it; True if deleted."""
        with self._db.tx() as db:
            n = db.execute(
                "DELETE FROM archive WHERE ref = ? AND agent = ? "
                "AND NOT EXISTS (SELECT 1 FROM proposals p WHERE p.ref = archive.ref)",
                (ref, agent),
            ).rowcount
        if n:
            self._retention.recount()
            self._db.archived(agent)  # (the search index forgets what was dropped)
        return bool(n)

    def sections(self, agent: str) -> int:
        """How many sections ``agent`` has archived (not evicted); read again only after a change."""
        db = self._db
        key = (db.archive_epoch, db.agent_epochs.get(agent, 0))
        cached = self._sections.get(agent)
        if cached is not None and cached[0] == key:
            return cached[1]
        sql = "SELECT COALESCE(SUM(sections), 0) FROM archive WHERE agent = ? AND evicted IS NULL"
        n = int(db.scalar(sql, agent))
        if len(self._sections) >= MAX_CACHED_COUNTS:
            self._sections.clear()
        self._sections[agent] = (key, n)
        return n

    def count(self, agent: str) -> int:
        """How many archive entries ``agent`` has (tombstones included)."""
        return int(self._db.scalar("SELECT COUNT(*) FROM archive WHERE agent = ?", agent))

    def refs(self, agent: str) -> list[str]:
        rows = self._db.conn.execute("SELECT ref FROM archive WHERE agent = ? ORDER BY seq", (agent,))
        return [r[0] for r in rows]


class ArchiveView(MutableMapping[str, tuple[Section, ...]]):
    """An agent's archive as a mapping ``ref -> originals``, backed by the store.

    Assigning is durable: ``view[ref] = originals`` returns after the commit (archive first).
    Reading sees only this agent's entries, across all its sessions.
    """

    def __init__(self, archive: Archive, agent: str, session: str) -> None:
        self.archive = archive
        self.agent = agent
        self.session = session

    def __setitem__(self, ref: str, originals: tuple[Section, ...]) -> None:
        self.archive.put(self.agent, self.session, ref, originals)

    async def put(self, ref: str, originals: tuple[Section, ...]) -> None:
        """``view[ref] = originals`` with the rows encoded in a thread (:func:`archive_rows`), so
        that only the insert and its commit run on the event loop; durable when this returns."""
        rows = await asyncio.to_thread(archive_rows, originals)
        self.archive.put(self.agent, self.session, ref, originals, rows)

    def __getitem__(self, ref: str) -> tuple[Section, ...]:
        if self.archive.entry(self.agent, ref) is None:
            raise KeyError(ref)
        return tuple(r.section for r in self.archive.originals(self.agent, ref))

    def __delitem__(self, ref: str) -> None:
        """Only an entry no proposal refers to (a job that produced nothing) can be removed; the
        originals of a proposal go only by the retention policy."""
        if not self.archive.drop_unproposed(self.agent, ref):
            raise KeyError(ref)

    def __iter__(self) -> Iterator[str]:
        return iter(self.archive.refs(self.agent))

    def __len__(self) -> int:
        return self.archive.count(self.agent)

    def section_count(self) -> int:
        return self.archive.sections(self.agent)
