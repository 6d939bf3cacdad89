"""The durable store: one SQLite file (WAL) in the state directory.

What it holds, per agent identity (and session):

* ``agents``, ``sessions`` — who attached, how they authenticated, when.
* ``archive`` + ``originals`` — every section a proposal replaces, archived *before* the proposal
  leaves the daemon: exact text, every attribute, and a SHA-256 of the section's canonical wire
  bytes that is checked on every read (a damaged row is an error, never silently wrong text).
* ``digests`` — each digest section with its source references (archive ref, replaced ids).
* ``proposals`` — the state machine ``planned → sent → acked | nacked | expired``
  (``planned → expired`` when it never left). Illegal transitions are refused.
* ``checkpoints`` — an agent's whole context at version V, with the side-effect epoch it declared.

Scope: every read takes the caller's agent identity and filters on it in SQL. There is no query
that returns another agent's rows; the daemon passes the *authenticated* identity (watcher.serve.auth).

Durability: WAL mode; ``PRAGMA synchronous`` from ``[store] synchronous`` (see docs/BENCHMARKS.md,
"Store and crash recovery", for the measurement behind the default). A kill -9 loses no committed
transaction at any level but ``off``; power loss can lose the last commits below ``full``.

The schema is versioned with ``PRAGMA user_version`` and upgraded by :data:`MIGRATIONS` in one
transaction each; a file written by a newer compactd is refused rather than misread.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgpack

from ipc.protocol import Proposal
from ipc.sections import Section, SectionError

DB_NAME: Final = "compactd.db"
SCHEMA_VERSION: Final = 1
STATES: Final = ("planned", "sent", "acked", "nacked", "expired")
OPEN_STATES: Final = ("planned", "sent")
TRANSITIONS: Final[dict[str, frozenset[str]]] = {
    "planned": frozenset({"sent", "expired"}),
    "sent": frozenset({"acked", "nacked", "expired"}),
}
SYNCHRONOUS_LEVELS: Final = ("off", "normal", "full", "extra")
_MAX_TEXT: Final = 1 << 31
_DAY: Final = 86400.0
# The WAL is checkpointed by a thread with its own connection once it holds this much (SQLite's own
# automatic checkpoint, 1000 pages, would run inside whichever commit crosses it: on the event loop)
WAL_CHECKPOINT_BYTES: Final = 4 << 20
WAL_INLINE_FACTOR: Final = 4  # the thread fell this far behind: the commit checkpoints (as SQLite would)
CHECKPOINT_TRIES: Final = 5
CHECKPOINT_RETRY_S: Final = 0.02

_V1: Final = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE agents (
    agent     TEXT PRIMARY KEY,
    auth      TEXT NOT NULL,            -- how it last authenticated: token | curve | local
    created   REAL NOT NULL,
    last_seen REAL NOT NULL
) WITHOUT ROWID;

CREATE TABLE sessions (
    agent     TEXT NOT NULL REFERENCES agents(agent),
    session   TEXT NOT NULL,
    created   REAL NOT NULL,
    last_seen REAL NOT NULL,
    attaches  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (agent, session)
) WITHOUT ROWID;

CREATE TABLE archive (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    ref          TEXT NOT NULL UNIQUE,
    agent        TEXT NOT NULL,
    session      TEXT NOT NULL,
    created      REAL NOT NULL,
    sections     INTEGER NOT NULL,
    tokens       INTEGER NOT NULL,
    bytes        INTEGER NOT NULL,      -- UTF-8 text + attributes of the originals
    evicted      REAL,                  -- set when retention removed the originals (tombstone)
    evict_reason TEXT
);
CREATE INDEX archive_by_agent ON archive(agent, seq);

CREATE TABLE originals (
    seq        INTEGER NOT NULL REFERENCES archive(seq) ON DELETE CASCADE,
    pos        INTEGER NOT NULL,
    agent      TEXT NOT NULL,
    session    TEXT NOT NULL,
    section_id TEXT NOT NULL,
    kind       TEXT NOT NULL,
    text       TEXT NOT NULL,           -- exact text
    attrs      BLOB NOT NULL,           -- msgpack: the section's other wire fields
    sha256     BLOB NOT NULL,           -- of msgpack(section.to_wire()): checked on every read
    PRIMARY KEY (seq, pos)
) WITHOUT ROWID;
CREATE INDEX originals_by_section ON originals(agent, section_id);

CREATE TABLE proposals (
    proposal      TEXT PRIMARY KEY,
    agent         TEXT NOT NULL,
    session       TEXT NOT NULL,
    ref           TEXT NOT NULL,
    base          INTEGER NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('planned', 'sent', 'acked', 'nacked', 'expired')),
    method        TEXT NOT NULL,
    wire          BLOB NOT NULL,        -- msgpack of the PROPOSAL as sent (re-offered after a restart)
    tokens_before INTEGER NOT NULL,
    tokens_after  INTEGER NOT NULL,
    created       REAL NOT NULL,
    updated       REAL NOT NULL,
    reason        TEXT NOT NULL DEFAULT '',
    acked_version INTEGER
) WITHOUT ROWID;
CREATE INDEX proposals_open ON proposals(agent, state);
CREATE INDEX proposals_by_state ON proposals(state);
CREATE INDEX proposals_by_ref ON proposals(ref);

CREATE TABLE digests (
    digest_id  TEXT PRIMARY KEY,
    agent      TEXT NOT NULL,
    session    TEXT NOT NULL,
    proposal   TEXT NOT NULL REFERENCES proposals(proposal),
    ref        TEXT NOT NULL,
    source_ids TEXT NOT NULL,           -- JSON list of the replaced section ids
    text       TEXT NOT NULL,
    tokens     INTEGER NOT NULL,
    method     TEXT NOT NULL,
    created    REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX digests_by_agent ON digests(agent, digest_id);

CREATE TABLE checkpoints (
    agent    TEXT NOT NULL,
    name     TEXT NOT NULL,
    session  TEXT NOT NULL,
    version  INTEGER NOT NULL,
    epoch    INTEGER NOT NULL,
    tokens   INTEGER NOT NULL,
    sections INTEGER NOT NULL,
    bytes    INTEGER NOT NULL,
    created  REAL NOT NULL,
    note     TEXT NOT NULL,
    body     BLOB NOT NULL,             -- msgpack list of the sections' wire maps
    sha256   BLOB NOT NULL,
    PRIMARY KEY (agent, name)
) WITHOUT ROWID;
"""

# (version, SQL script): applied in order, each in one transaction with its user_version bump.
MIGRATIONS: Final[tuple[tuple[int, str], ...]] = ((1, _V1),)


class StoreError(RuntimeError):
    """The store cannot be opened or used; the message says what and what to do."""


class CorruptError(StoreError):
    """A row failed its checksum or the database failed PRAGMA integrity_check."""


class TransitionError(StoreError):
    """A proposal state change the state machine does not allow."""


# --- records ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArchiveEntry:
    ref: str
    agent: str
    session: str
    created: float
    sections: int
    tokens: int
    bytes: int
    evicted: float | None
    evict_reason: str
    state: str  # state of the proposal that archived it ("" if none)


@dataclass(frozen=True, slots=True)
class Recalled:
    """One archived section: which archive entry it came from and its position there."""

    ref: str
    session: str
    pos: int
    section: Section


@dataclass(frozen=True, slots=True)
class Hit:
    ref: str
    session: str
    pos: int
    section_id: str
    kind: str
    created: float
    snippet: str


@dataclass(frozen=True, slots=True)
class StoredProposal:
    proposal: Proposal
    session: str
    ref: str
    state: str
    method: str


@dataclass(frozen=True, slots=True)
class CheckpointMeta:
    name: str
    session: str
    version: int
    epoch: int
    tokens: int
    sections: int
    bytes: int
    created: float
    note: str

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "session": self.session,
            "version": self.version,
            "epoch": self.epoch,
            "tokens": self.tokens,
            "sections": self.sections,
            "bytes": self.bytes,
            "created": self.created,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class BootReport:
    expired_planned: int  # proposals whose digest never left: expired, their archive rows removed
    orphan_archives: int  # archive entries no proposal refers to (a crash during summarization)
    open_sent: int  # proposals sent before the restart: reconciled when their agent resumes


@dataclass(frozen=True, slots=True)
class Evicted:
    by_age: int
    by_size: int
    bytes: int


# --- section encoding ------------------------------------------------------------------------------


def _pack(obj: Any) -> bytes:
    out: bytes = msgpack.packb(obj, use_bin_type=True)
    return out


def section_digest(sec: Section) -> bytes:
    """SHA-256 of the section's canonical wire bytes (what the agent sees, field for field)."""
    return hashlib.sha256(_pack(sec.to_wire())).digest()


def _attrs(sec: Section) -> bytes:
    wire = sec.to_wire()
    del wire["id"], wire["kind"], wire["text"]
    return _pack(wire)


def _section(section_id: str, kind: str, text: str, attrs: bytes) -> Section:
    wire = msgpack.unpackb(attrs, raw=False)
    wire.update(id=section_id, kind=kind, text=text)
    return Section.from_wire(wire, _MAX_TEXT)


def section_bytes(sec: Section) -> int:
    return len(sec.text.encode("utf-8", "surrogatepass")) + len(_attrs(sec))


@dataclass(frozen=True, slots=True)
class ArchiveRows:
    """The encoded rows of an archive entry (:func:`archive_rows`): what :meth:`Store.put_archive`
    computes before its transaction, prepared anywhere (a thread: it is pure)."""

    rows: tuple[tuple[int, str, str, bytes, bytes], ...]  # (pos, section_id, kind, attrs, sha256)
    texts: tuple[str, ...]
    tokens: int
    bytes: int


def archive_rows(originals: Sequence[Section]) -> ArchiveRows:
    """Attributes, checksums and sizes of ``originals`` (msgpack + SHA-256: the CPU-heavy part of
    archiving, ~50 µs a section)."""
    total = 0
    rows = []
    for pos, sec in enumerate(originals):
        attrs = _attrs(sec)
        total += len(sec.text.encode("utf-8", "surrogatepass")) + len(attrs)
        rows.append((pos, sec.id, sec.kind, attrs, section_digest(sec)))
    return ArchiveRows(tuple(rows), tuple(s.text for s in originals), sum(s.tokens for s in originals), total)


_ID_NUMBER = re.compile(r"(\d+)$")


def _ascii_lower(s: str) -> str:
    return s.translate(_LOWER)


_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


# --- the store -------------------------------------------------------------------------------------


class Store:
    """One connection, used from the daemon's event loop (every call is short and synchronous)."""

    def __init__(
        self,
        db: sqlite3.Connection,
        path: str,
        *,
        retention_days: int = 0,
        max_archive_mb: int = 0,
        synchronous: str = "normal",
        lock_fd: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.path = path
        self.retention_days = retention_days
        self.max_archive_mb = max_archive_mb
        self.synchronous = synchronous
        self.clock = clock
        self._lock_fd = lock_fd
        self._checkpointer: _Checkpointer | None = None  # (open(): the WAL is checkpointed off the loop)
        self.commits = 0
        self.syncs = 0
        self.sync_points = True  # fsync the points of no return at level normal (see _tx)
        self.archived_bytes = self._scalar(
            "SELECT COALESCE(SUM(bytes), 0) FROM archive WHERE evicted IS NULL"
        )

    # --- opening ---------------------------------------------------------------------------------
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
        """Open (creating it 0600 if needed) and migrate the database; StoreError if unusable.

        Takes an exclusive lock on ``PATH.lock``: two daemons on one state directory would hand
        out the same archive references. ``integrity_check`` runs PRAGMA integrity_check and
        refuses a damaged file (the archive is the one thing compactd promises to keep).
        """
        if synchronous not in SYNCHRONOUS_LEVELS:
            raise StoreError(f"store.synchronous must be one of {', '.join(SYNCHRONOUS_LEVELS)}")
        p = Path(path)
        lock_fd = _lock(p)
        try:
            if not p.exists():
                os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o600))
            db = _connect(str(p), synchronous)
            try:
                if integrity_check:
                    problems = check_integrity(db)
                    if problems:
                        raise CorruptError(
                            f"{p}: PRAGMA integrity_check failed: {'; '.join(problems[:5])}. "
                            "Stop compactd, keep a copy of the file, and restore it from a backup "
                            "(or move it away to start with an empty archive)"
                        )
                migrate(db, str(p))
                store = cls(
                    db,
                    str(p),
                    retention_days=retention_days,
                    max_archive_mb=max_archive_mb,
                    synchronous=synchronous,
                    lock_fd=lock_fd,
                    clock=clock,
                )
                store._checkpointer = _Checkpointer.start(db, str(p), synchronous)
            except BaseException:
                db.close()
                raise
        except sqlite3.DatabaseError as exc:
            os.close(lock_fd)
            raise StoreError(f"{p}: not a usable SQLite database: {exc}") from exc
        except BaseException:
            os.close(lock_fd)
            raise
        return store

    @classmethod
    def readonly(cls, path: str | Path) -> Store:
        """A read-only view of a store file (tools; the daemon may be running or not)."""
        return cls(connect_readonly(path), str(path))

    @classmethod
    def memory(cls) -> Store:
        """A throwaway store (tests, embedders without a state directory)."""
        db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA foreign_keys = ON")
        migrate(db, ":memory:")
        return cls(db, ":memory:")

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None
        with contextlib.suppress(sqlite3.Error):
            self.db.execute("PRAGMA optimize")
        self.db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def wal_checkpoints(self) -> int:
        """Checkpoints the WAL thread has run (0 where SQLite's automatic checkpoints are on)."""
        return self._checkpointer.runs if self._checkpointer is not None else 0

    @property
    def schema_version(self) -> int:
        return int(self._scalar("PRAGMA user_version"))

    def integrity(self) -> list[str]:
        """PRAGMA integrity_check; [] when the database is sound."""
        return check_integrity(self.db)

    # --- helpers ---------------------------------------------------------------------------------
    def _scalar(self, sql: str, *args: Any) -> Any:
        row = self.db.execute(sql, args).fetchone()
        return row[0] if row else None

    @contextlib.contextmanager
    def _tx(self, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One transaction. ``durable`` (a checkpoint save): at level ``normal`` this commit alone
        is fsynced, as under ``full``; in WAL mode that makes every earlier commit durable too."""
        sync = durable and self.sync_points and self.synchronous == "normal"
        if sync:
            self.db.execute("PRAGMA synchronous = FULL")
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        finally:
            if sync:
                self.db.execute("PRAGMA synchronous = NORMAL")
        self.commits += 1
        if self._checkpointer is not None:
            self._checkpointer.poke()

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

    def next_id_floor(self) -> int:
        """One more than the largest number in any stored ref, proposal or digest id, so ids handed
        out after a restart never collide with ones an agent may still hold."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'id_floor'").fetchone()
        best = int(row[0]) - 1 if row else 0
        for sql in (
            "SELECT ref FROM archive",
            "SELECT proposal FROM proposals",
            "SELECT digest_id FROM digests",
        ):
            for (value,) in self.db.execute(sql):
                m = _ID_NUMBER.search(value)
                if m:
                    best = max(best, int(m[1]))
        return best + 1

    # --- agents and sessions ---------------------------------------------------------------------
    def touch(self, agent: str, session: str, auth: str) -> None:
        now = self.clock()
        with self._tx() as db:
            db.execute(
                "INSERT INTO agents(agent, auth, created, last_seen) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(agent) DO UPDATE SET auth = excluded.auth, last_seen = excluded.last_seen",
                (agent, auth, now, now),
            )
            db.execute(
                "INSERT INTO sessions(agent, session, created, last_seen, attaches) VALUES (?, ?, ?, ?, 1) "
                "ON CONFLICT(agent, session) DO UPDATE SET last_seen = excluded.last_seen, "
                "attaches = attaches + 1",
                (agent, session, now, now),
            )

    def sessions(self, agent: str) -> list[str]:
        rows = self.db.execute("SELECT session FROM sessions WHERE agent = ? ORDER BY created", (agent,))
        return [r[0] for r in rows]

    # --- archive ---------------------------------------------------------------------------------
    def put_archive(
        self,
        agent: str,
        session: str,
        ref: str,
        originals: Sequence[Section],
        rows: ArchiveRows | None = None,
    ) -> None:
        """Archive ``originals`` under ``ref``; committed (durable) when this returns. ``rows``:
        their :func:`archive_rows`, if computed already (off the event loop: ArchiveView.put)."""
        now = self.clock()
        enc = rows if rows is not None else archive_rows(originals)
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO archive(ref, agent, session, created, sections, tokens, bytes) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (ref, agent, session, now, len(enc.rows), enc.tokens, enc.bytes),
            )
            seq = cur.lastrowid
            db.executemany(
                "INSERT INTO originals(seq, pos, agent, session, section_id, kind, text, attrs, sha256) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (seq, pos, agent, session, sid, kind, text, attrs, sha)
                    for (pos, sid, kind, attrs, sha), text in zip(enc.rows, enc.texts, strict=True)
                ],
            )
        self.archived_bytes += enc.bytes
        if self.max_archive_mb and self.archived_bytes > self.max_archive_mb * 1024 * 1024:
            self.enforce_retention()

    def entry(self, agent: str, ref: str) -> ArchiveEntry | None:
        """The archive entry ``ref`` if it belongs to ``agent``; None otherwise (no oracle)."""
        row = self.db.execute(
            "SELECT a.ref, a.agent, a.session, a.created, a.sections, a.tokens, a.bytes, a.evicted, "
            "COALESCE(a.evict_reason, ''), COALESCE(p.state, '') FROM archive a "
            "LEFT JOIN proposals p ON p.ref = a.ref WHERE a.ref = ? AND a.agent = ?",
            (ref, agent),
        ).fetchone()
        return ArchiveEntry(*row) if row else None

    def entries(self, agent: str, *, session: str | None = None, limit: int = 100) -> list[ArchiveEntry]:
        sql = (
            "SELECT a.ref, a.agent, a.session, a.created, a.sections, a.tokens, a.bytes, a.evicted, "
            "COALESCE(a.evict_reason, ''), COALESCE(p.state, '') FROM archive a "
            "LEFT JOIN proposals p ON p.ref = a.ref WHERE a.agent = ?"
        )
        args: list[Any] = [agent]
        if session is not None:
            sql += " AND a.session = ?"
            args.append(session)
        sql += " ORDER BY a.seq DESC LIMIT ?"
        args.append(limit)
        return [ArchiveEntry(*r) for r in self.db.execute(sql, args)]

    def originals(self, agent: str, ref: str, *, offset: int = 0, limit: int = -1) -> list[Recalled]:
        """The archived sections of ``ref`` (in order) if it belongs to ``agent``; checksums verified."""
        rows = self.db.execute(
            "SELECT a.ref, o.session, o.pos, o.section_id, o.kind, o.text, o.attrs, o.sha256 "
            "FROM archive a JOIN originals o ON o.seq = a.seq "
            "WHERE a.ref = ? AND a.agent = ? ORDER BY o.pos LIMIT ? OFFSET ?",
            (ref, agent, limit, offset),
        )
        return [_recalled(r) for r in rows]

    def by_section(self, agent: str, section_id: str) -> list[Recalled]:
        """Archived copies of section ``section_id`` in ``agent``'s scope, newest first. A digest's id
        yields the originals that digest replaced."""
        digest = self.db.execute(
            "SELECT ref FROM digests WHERE agent = ? AND digest_id = ?", (agent, section_id)
        ).fetchone()
        if digest is not None:
            return self.originals(agent, digest[0])
        rows = self.db.execute(
            "SELECT a.ref, o.session, o.pos, o.section_id, o.kind, o.text, o.attrs, o.sha256 "
            "FROM originals o JOIN archive a ON a.seq = o.seq "
            "WHERE o.agent = ? AND o.section_id = ? ORDER BY o.seq DESC, o.pos",
            (agent, section_id),
        )
        return [_recalled(r) for r in rows]

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
        newest first; returns (hits, more)."""
        needle = _ascii_lower(query)
        sql = (
            "SELECT a.ref, o.session, o.pos, o.section_id, o.kind, a.created, o.text "
            "FROM originals o JOIN archive a ON a.seq = o.seq "
            "WHERE o.agent = ? AND instr(lower(o.text), ?) > 0"
        )
        args: list[Any] = [agent, needle]
        if session is not None:
            sql += " AND o.session = ?"
            args.append(session)
        sql += " ORDER BY o.seq DESC, o.pos LIMIT ? OFFSET ?"
        args += [limit + 1, offset]
        hits = []
        for ref, sess, pos, sid, kind, created, text in self.db.execute(sql, args):
            at = _ascii_lower(text).find(needle)
            lo, hi = max(0, at - context_chars), min(len(text), at + len(query) + context_chars)
            snippet = ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")
            hits.append(Hit(ref, sess, pos, sid, kind, created, snippet))
        return hits[:limit], len(hits) > limit

    def drop_unproposed(self, agent: str, ref: str) -> bool:
        """Delete archive entry ``ref`` if no proposal refers to it; True if deleted."""
        with self._tx() as db:
            n = db.execute(
                "DELETE FROM archive WHERE ref = ? AND agent = ? "
                "AND NOT EXISTS (SELECT 1 FROM proposals p WHERE p.ref = archive.ref)",
                (ref, agent),
            ).rowcount
        if n:
            self._recount()
        return bool(n)

    def count_archived(self, agent: str) -> int:
        return int(
            self._scalar(
                "SELECT COALESCE(SUM(sections), 0) FROM archive WHERE agent = ? AND evicted IS NULL", agent
            )
        )

    def refs(self, agent: str) -> list[str]:
        return [
            r[0] for r in self.db.execute("SELECT ref FROM archive WHERE agent = ? ORDER BY seq", (agent,))
        ]

    # --- proposals -------------------------------------------------------------------------------
    def plan(self, agent: str, session: str, proposal: Proposal, method: str) -> None:
        """Record a built proposal as ``planned``, with its digest sections and their sources."""
        now = self.clock()
        ref = proposal.archive[0] if proposal.archive else ""
        with self._tx() as db:
            db.execute(
                "INSERT INTO proposals(proposal, agent, session, ref, base, state, method, wire, "
                "tokens_before, tokens_after, created, updated) "
                "VALUES (?, ?, ?, ?, ?, 'planned', ?, ?, ?, ?, ?, ?)",
                (
                    proposal.proposal,
                    agent,
                    session,
                    ref,
                    proposal.base,
                    method,
                    _pack(proposal.to_wire()),
                    proposal.tokens_before,
                    proposal.tokens_after,
                    now,
                    now,
                ),
            )
            replaced = set(proposal.replaces)
            for sec in proposal.digest:
                if sec.id in replaced:  # a section passed through unchanged (masking)
                    continue
                db.execute(
                    "INSERT OR REPLACE INTO digests(digest_id, agent, session, proposal, ref, source_ids, "
                    "text, tokens, method, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        sec.id,
                        agent,
                        session,
                        proposal.proposal,
                        sec.meta.get("archive", ref),
                        json.dumps(list(proposal.replaces)),
                        sec.text,
                        sec.tokens,
                        method,
                        now,
                    ),
                )

    def transition(
        self, agent: str, proposal: str, to: str, *, reason: str = "", version: int | None = None
    ) -> str:
        """Move ``proposal`` to state ``to``; returns the state it was in. TransitionError if the state
        machine does not allow it (or the proposal is unknown to this agent). The move to ``sent``
        is the point of no return: the server calls :meth:`sync_wal` before the proposal leaves."""
        with self._tx() as db:
            row = db.execute(
                "SELECT state FROM proposals WHERE proposal = ? AND agent = ?", (proposal, agent)
            ).fetchone()
            if row is None:
                raise TransitionError(f"no proposal {proposal!r} for agent {agent!r}")
            old = row[0]
            if to not in TRANSITIONS.get(old, frozenset()):
                raise TransitionError(f"proposal {proposal}: {old} -> {to} is not allowed")
            db.execute(
                "UPDATE proposals SET state = ?, updated = ?, reason = ?, "
                "acked_version = COALESCE(?, acked_version) WHERE proposal = ?",
                (to, self.clock(), reason, version, proposal),
            )
            if old == "planned" and to == "expired":
                _drop_archive(db, proposal)  # it never left: no agent can hold a digest of it
        return str(old)

    def reoffer(self, agent: str, proposal: Proposal) -> None:
        """Keep a sent proposal open with a new base version (after a resync or restart)."""
        with self._tx() as db:
            db.execute(
                "UPDATE proposals SET base = ?, wire = ?, updated = ? "
                "WHERE proposal = ? AND agent = ? AND state = 'sent'",
                (proposal.base, _pack(proposal.to_wire()), self.clock(), proposal.proposal, agent),
            )

    def state_of(self, agent: str, proposal: str) -> str:
        row = self.db.execute(
            "SELECT state FROM proposals WHERE proposal = ? AND agent = ?", (proposal, agent)
        ).fetchone()
        return str(row[0]) if row else ""

    def open_proposals(self, agent: str, session: str | None = None) -> list[StoredProposal]:
        """This agent's ``sent`` proposals (optionally of one session), oldest first."""
        sql = "SELECT wire, session, ref, state, method FROM proposals WHERE agent = ? AND state = 'sent'"
        args: list[Any] = [agent]
        if session is not None:
            sql += " AND session = ?"
            args.append(session)
        out = []
        for wire, sess, ref, state, method in self.db.execute(sql + " ORDER BY created", args):
            msg = msgpack.unpackb(wire, raw=False)
            out.append(StoredProposal(Proposal.from_wire(msg, _MAX_TEXT), sess, ref, state, method))
        return out

    def expire_open(
        self,
        agent: str | None = None,
        *,
        except_session: str | None = None,
        older_than: float | None = None,
        reason: str = "",
    ) -> int:
        """Expire open proposals (of ``agent``, except those of ``except_session``, updated before
        ``older_than``); planned ones also lose their never-sent archive rows. Returns how many."""
        where = ["state IN ('planned', 'sent')"]
        args: list[Any] = []
        if agent is not None:
            where.append("agent = ?")
            args.append(agent)
        if except_session is not None:
            where.append("session != ?")
            args.append(except_session)
        if older_than is not None:
            where.append("updated < ?")
            args.append(older_than)
        with self._tx() as db:
            rows = db.execute(
                f"SELECT proposal, state FROM proposals WHERE {' AND '.join(where)}", args
            ).fetchall()
            for pid, state in rows:
                if state == "planned":
                    _drop_archive(db, pid)
                db.execute(
                    "UPDATE proposals SET state = 'expired', updated = ?, reason = ? WHERE proposal = ?",
                    (self.clock(), reason, pid),
                )
        if rows:
            self._recount()
        return len(rows)

    def agents_with_open(self) -> list[str]:
        rows = self.db.execute("SELECT DISTINCT agent FROM proposals WHERE state IN ('planned', 'sent')")
        return [r[0] for r in rows]

    def proposal_counts(self, agent: str | None = None) -> dict[str, int]:
        sql = "SELECT state, COUNT(*) FROM proposals"
        args: tuple[Any, ...] = ()
        if agent is not None:
            sql += " WHERE agent = ?"
            args = (agent,)
        counts = dict.fromkeys(STATES, 0)
        counts.update({s: n for s, n in self.db.execute(sql + " GROUP BY state", args)})
        return counts

    # --- boot ------------------------------------------------------------------------------------
    def recover(self) -> BootReport:
        """After a start (clean or kill -9): proposals still ``planned`` never left the daemon, so
        they expire and their archive rows go; archive entries no proposal refers to were written
        by a job the crash interrupted (during summarization) and go too. ``sent`` ones stay open
        until their agent resumes (watcher.serve.recovery.reconcile) or they age out. The ids of what is
        removed are not handed out again (meta ``id_floor``)."""
        floor = self.next_id_floor()
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('id_floor', ?)", (str(floor),))
            planned = [r[0] for r in db.execute("SELECT proposal FROM proposals WHERE state = 'planned'")]
            for pid in planned:
                _drop_archive(db, pid)
                db.execute(
                    "UPDATE proposals SET state = 'expired', updated = ?, reason = ? WHERE proposal = ?",
                    (self.clock(), "restart before it was sent", pid),
                )
            orphans = db.execute(
                "DELETE FROM archive WHERE evicted IS NULL AND ref NOT IN (SELECT ref FROM proposals)"
            ).rowcount
            sent = int(db.execute("SELECT COUNT(*) FROM proposals WHERE state = 'sent'").fetchone()[0])
        self._recount()
        return BootReport(len(planned), orphans, sent)

    def _recount(self) -> None:
        self.archived_bytes = self._scalar(
            "SELECT COALESCE(SUM(bytes), 0) FROM archive WHERE evicted IS NULL"
        )

    # --- checkpoints -----------------------------------------------------------------------------
    def save_checkpoint(
        self,
        agent: str,
        session: str,
        name: str,
        sections: Sequence[Section],
        *,
        version: int,
        epoch: int,
        note: str = "",
        overwrite: bool = False,
    ) -> CheckpointMeta:
        body = _pack([s.to_wire() for s in sections])
        meta = CheckpointMeta(
            name,
            session,
            version,
            epoch,
            sum(s.tokens for s in sections),
            len(sections),
            len(body),
            self.clock(),
            note,
        )
        with self._tx(durable=True) as db:
            exists = db.execute(
                "SELECT 1 FROM checkpoints WHERE agent = ? AND name = ?", (agent, name)
            ).fetchone()
            if exists and not overwrite:
                raise StoreError(f"checkpoint {name!r} exists; drop it first or save with overwrite")
            db.execute(
                "INSERT OR REPLACE INTO checkpoints(agent, name, session, version, epoch, tokens, "
                "sections, bytes, created, note, body, sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    agent,
                    name,
                    session,
                    version,
                    epoch,
                    meta.tokens,
                    meta.sections,
                    meta.bytes,
                    meta.created,
                    note,
                    body,
                    hashlib.sha256(body).digest(),
                ),
            )
        return meta

    def checkpoints(self, agent: str) -> list[CheckpointMeta]:
        rows = self.db.execute(
            "SELECT name, session, version, epoch, tokens, sections, bytes, created, note "
            "FROM checkpoints WHERE agent = ? ORDER BY created, name",
            (agent,),
        )
        return [CheckpointMeta(*r) for r in rows]

    def checkpoint(self, agent: str, name: str) -> tuple[CheckpointMeta, list[Section]] | None:
        row = self.db.execute(
            "SELECT name, session, version, epoch, tokens, sections, bytes, created, note, body, sha256 "
            "FROM checkpoints WHERE agent = ? AND name = ?",
            (agent, name),
        ).fetchone()
        if row is None:
            return None
        body, digest = row[9], row[10]
        if hashlib.sha256(body).digest() != digest:
            raise CorruptError(f"checkpoint {name!r} of {agent!r} failed its checksum")
        sections = [Section.from_wire(w, _MAX_TEXT) for w in msgpack.unpackb(body, raw=False)]
        return CheckpointMeta(*row[:9]), sections

    def drop_checkpoint(self, agent: str, name: str) -> bool:
        with self._tx() as db:
            n = db.execute("DELETE FROM checkpoints WHERE agent = ? AND name = ?", (agent, name)).rowcount
        return bool(n)

    # --- retention -------------------------------------------------------------------------------
    def enforce_retention(self, now: float | None = None) -> Evicted:
        """Evict archived originals (keeping a tombstone that says when and why):

        1. older than ``retention_days`` (0 = never);
        2. while the archive holds more than ``max_archive_mb`` (0 = no cap): first originals of
           *nacked* proposals (the agent kept them in its context), then the oldest of the rest.

        Never the originals of an open (planned or sent) proposal, nor an entry no proposal refers
        to yet (its job is summarizing; a crash leaves it to recover()). Checkpoints are not evicted:
        they are the agent's explicit saves (``drop`` removes them).
        """
        now = self.clock() if now is None else now
        by_age = by_size = freed = 0
        with self._tx() as db:
            if self.retention_days:
                cutoff = now - self.retention_days * _DAY
                rows = db.execute(
                    "SELECT a.seq, a.bytes FROM archive a LEFT JOIN proposals p ON p.ref = a.ref "
                    "WHERE a.evicted IS NULL AND a.created < ? "
                    "AND COALESCE(p.state, 'planned') NOT IN ('planned', 'sent')",
                    (cutoff,),
                ).fetchall()
                reason = f"older than store.retention_days = {self.retention_days}"
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
                self.db.execute("PRAGMA incremental_vacuum")
            self._recount()
        return Evicted(by_age, by_size, freed)

    def stats(self) -> dict[str, Any]:
        page_size = int(self._scalar("PRAGMA page_size"))
        pages = int(self._scalar("PRAGMA page_count"))
        return {
            "path": self.path,
            "schema": self.schema_version,
            "synchronous": self.synchronous,
            "archived_bytes": int(self.archived_bytes),
            "archive_entries": int(self._scalar("SELECT COUNT(*) FROM archive WHERE evicted IS NULL")),
            "evicted_entries": int(self._scalar("SELECT COUNT(*) FROM archive WHERE evicted IS NOT NULL")),
            "checkpoints": int(self._scalar("SELECT COUNT(*) FROM checkpoints")),
            "proposals": self.proposal_counts(),
            "file_bytes": page_size * pages,
        }


# --- the per-agent view Session.archive holds ------------------------------------------------


class ArchiveView(MutableMapping[str, tuple[Section, ...]]):
    """An agent's archive as a mapping ``ref -> originals``, backed by the store.

    Assigning is durable: ``view[ref] = originals`` returns after the commit (archive first).
    Reading sees only this agent's entries, across all its sessions.
    """

    def __init__(self, store: Store, agent: str, session: str) -> None:
        self.store = store
        self.agent = agent
        self.session = session

    def __setitem__(self, ref: str, originals: tuple[Section, ...]) -> None:
        self.store.put_archive(self.agent, self.session, ref, originals)

    async def put(self, ref: str, originals: tuple[Section, ...]) -> None:
        """``view[ref] = originals`` with the rows encoded in a thread (:func:`archive_rows`), so
        that only the insert and its commit run on the event loop; durable when this returns."""
        rows = await asyncio.to_thread(archive_rows, originals)
        self.store.put_archive(self.agent, self.session, ref, originals, rows)

    def __getitem__(self, ref: str) -> tuple[Section, ...]:
        if self.store.entry(self.agent, ref) is None:
            raise KeyError(ref)
        return tuple(r.section for r in self.store.originals(self.agent, ref))

    def __delitem__(self, ref: str) -> None:
        """Only an entry no proposal refers to (a job that produced nothing) can be removed; the
        originals of a proposal go only by the retention policy."""
        if not self.store.drop_unproposed(self.agent, ref):
            raise KeyError(ref)

    def __iter__(self) -> Iterator[str]:
        return iter(self.store.refs(self.agent))

    def __len__(self) -> int:
        return int(self.store._scalar("SELECT COUNT(*) FROM archive WHERE agent = ?", self.agent))

    def section_count(self) -> int:
        return self.store.count_archived(self.agent)


# --- module helpers --------------------------------------------------------------------------------


class _Checkpointer:
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
        self._ckpt = ckpt
        self._running = threading.Lock()  # held by a checkpoint in progress
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._main, name="compactd-wal-checkpoint", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, db: sqlite3.Connection, path: str, synchronous: str) -> _Checkpointer | None:
        """None (SQLite's automatic checkpoints stay on) if the second connection cannot be had."""
        try:
            ckpt = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=5.0)
        except sqlite3.Error:
            return None
        try:
            ckpt.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            db.execute("PRAGMA wal_autocheckpoint = 0")
            # the WAL file is truncated when it restarts after a complete checkpoint, so that its
            # size is what was written since (poke); else it keeps its largest size
            db.execute("PRAGMA journal_size_limit = 0")
        except sqlite3.Error:
            ckpt.close()
            return None
        return cls(db, ckpt, path)

    def poke(self) -> None:
        """After a commit (a stat: ~2 µs). Should the thread fall behind (its checkpoint completes
        only if no commit comes while it copies), at WAL_INLINE_FACTOR times the size the daemon's
        connection checkpoints itself, as SQLite's automatic checkpoint would have."""
        try:
            size = os.stat(self.wal).st_size
        except OSError:
            return
        if size >= WAL_CHECKPOINT_BYTES:
            self._wake.set()
        if size >= WAL_INLINE_FACTOR * WAL_CHECKPOINT_BYTES:
            with self._running, contextlib.suppress(sqlite3.Error):  # after the thread's checkpoint
                self.db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self.inline += 1

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
                            busy, log, done = self._ckpt.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                        self.runs += 1
                    except sqlite3.Error:
                        self.failures += 1
                        break
                    if (not busy and log == done) or self._stop:
                        break
                    time.sleep(CHECKPOINT_RETRY_S)
        finally:
            self._ckpt.close()

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(30)
        with contextlib.suppress(sqlite3.Error):
            self.db.execute("PRAGMA wal_autocheckpoint = 1000")
            self.db.execute("PRAGMA journal_size_limit = -1")


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


def check_integrity(db: sqlite3.Connection) -> list[str]:
    rows = [str(r[0]) for r in db.execute("PRAGMA integrity_check")]
    return [] if rows == ["ok"] else rows


def migrate(db: sqlite3.Connection, where: str) -> int:
    """Bring the schema to SCHEMA_VERSION; returns the version found. StoreError if it is newer."""
    found = int(db.execute("PRAGMA user_version").fetchone()[0])
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"{where}: the store has schema version {found}, newer than this compactd's "
            f"{SCHEMA_VERSION}; run a newer compactd (or move the file away)"
        )
    for version, script in MIGRATIONS:
        if version <= found:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(script):
                db.execute(statement)
            if version == 1:
                db.execute("INSERT INTO meta(key, value) VALUES ('created', ?)", (str(time.time()),))
            db.execute(f"PRAGMA user_version = {version}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    return found


def _statements(script: str) -> list[str]:
    """Split a migration script on ';' at line ends (the scripts hold no ';' inside strings)."""
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";\n") if s.strip().rstrip(";")]


def _recalled(row: tuple[Any, ...]) -> Recalled:
    ref, session, pos, sid, kind, text, attrs, digest = row
    try:
        sec = _section(sid, kind, text, attrs)
    except (SectionError, ValueError, msgpack.UnpackException) as exc:
        raise CorruptError(f"archive {ref} position {pos}: cannot decode: {exc}") from exc
    if section_digest(sec) != digest:
        raise CorruptError(f"archive {ref} position {pos} ({sid}) failed its checksum")
    return Recalled(ref, session, pos, sec)


def _drop_archive(db: sqlite3.Connection, proposal: str) -> None:
    db.execute("DELETE FROM archive WHERE ref = (SELECT ref FROM proposals WHERE proposal = ?)", (proposal,))


def _evict(db: sqlite3.Connection, seq: int, now: float, reason: str) -> None:
    """Remove an entry's originals and what only served them (its settled proposal and digest
    rows); the archive row stays as a tombstone that says when and why."""
    db.execute("DELETE FROM originals WHERE seq = ?", (seq,))
    db.execute("UPDATE archive SET evicted = ?, evict_reason = ? WHERE seq = ?", (now, reason, seq))
    ref = "(SELECT ref FROM archive WHERE seq = ?)"
    db.execute(f"DELETE FROM digests WHERE ref = {ref}", (seq,))
    db.execute(f"DELETE FROM proposals WHERE ref = {ref} AND state NOT IN ('planned', 'sent')", (seq,))
