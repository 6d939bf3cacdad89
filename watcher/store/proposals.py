"""Proposals and their digests: the state machine ``planned → sent → acked | nacked | expired``
(``planned → expired`` when it never left); illegal transitions are refused. Each digest section
is recorded with its source references (archive ref, replaced ids)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Final

import msgpack

from ipc.protocol import Proposal
from watcher.store.codec import MAX_TEXT, pack
from watcher.store.database import Database
from watcher.store.records import StoredProposal, TransitionError
from watcher.store.retention import Retention, drop_archive_of

STATES: Final = ("planned", "sent", "acked", "nacked", "expired")
OPEN_STATES: Final = ("planned", "sent")
TRANSITIONS: Final[dict[str, frozenset[str]]] = {
    "planned": frozenset({"sent", "expired"}),
    "sent": frozenset({"acked", "nacked", "expired"}),
}

_FROM: Final[dict[str, tuple[str, ...]]] = {
    to: tuple(sorted(old for old, tos in TRANSITIONS.items() if to in tos))
    for to in {t for tos in TRANSITIONS.values() for t in tos}
}  # the states a move to each state can come from


class Proposals:
    def __init__(self, db: Database, retention: Retention) -> None:
        self._db = db
        self._retention = retention

    def record(self, agent: str, session: str, proposal: Proposal, method: str) -> None:
        """Record a built proposal as ``planned``, with its digest sections and their sources."""
        now = self._db.clock()
        ref = proposal.archive[0] if proposal.archive else ""
        with self._db.tx() as db:
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
                    pack(proposal.to_wire()),
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
        is the point of no return: the server calls ``Store.sync_wal`` before the proposal leaves."""
        update = (
            "UPDATE proposals SET state = ?, updated = ?, reason = ?, "
            "acked_version = COALESCE(?, acked_version) WHERE proposal = ? AND agent = ?"
        )
        args = (to, self._db.clock(), reason, version, proposal, agent)
        with self._db.tx() as db:
            # a move with one state it can come from (sent, acked, nacked) is one statement; the
            # state is then read only when the move was refused, to say why
            only = _FROM.get(to, ())
            if len(only) == 1 and db.execute(update + " AND state = ?", (*args, only[0])).rowcount == 1:
                return only[0]
            row = db.execute(
                "SELECT state FROM proposals WHERE proposal = ? AND agent = ?", (proposal, agent)
            ).fetchone()
            if row is None:
                raise TransitionError(f"no proposal {proposal!r} for agent {agent!r}")
            old = row[0]
            if to not in TRANSITIONS.get(old, frozenset()):
                raise TransitionError(f"proposal {proposal}: {old} -> {to} is not allowed")
            db.execute(update, args)
            if old == "planned" and to == "expired":
                drop_archive_of(db, proposal)  # it never left: no agent can hold a digest of it
        if old == "planned" and to == "expired":
            self._retention.recount()  # its archive entry's bytes are no longer held
            self._db.archived()  # (the search index forgets what was dropped)
        return str(old)

    def reoffer(self, agent: str, proposal: Proposal) -> None:
        """Keep a sent proposal open with a new base version (after a resync or restart)."""
        with self._db.tx() as db:
            db.execute(
                "UPDATE proposals SET base = ?, wire = ?, updated = ? "
                "WHERE proposal = ? AND agent = ? AND state = 'sent'",
                (proposal.base, pack(proposal.to_wire()), self._db.clock(), proposal.proposal, agent),
            )

    def state_of(self, agent: str, proposal: str) -> str:
        row = self._db.conn.execute(
            "SELECT state FROM proposals WHERE proposal = ? AND agent = ?", (proposal, agent)
        ).fetchone()
        return str(row[0]) if row else ""

    def open(self, agent: str, session: str | None = None) -> list[StoredProposal]:
        """This agent's ``sent`` proposals (optionally of one session), oldest first."""
        sql = "SELECT wire, session, ref, state, method FROM proposals WHERE agent = ? AND state = 'sent'"
        args: list[Any] = [agent]
        if session is not None:
            sql += " AND session = ?"
            args.append(session)
        out = []
        for wire, sess, ref, state, method in self._db.conn.execute(sql + " ORDER BY created", args):
            msg = msgpack.unpackb(wire, raw=False)
            out.append(StoredProposal(Proposal.from_wire(msg, MAX_TEXT), sess, ref, state, method))
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
        with self._db.tx() as db:
            rows = db.execute(
                f"SELECT proposal, state FROM proposals WHERE {' AND '.join(where)}", args
            ).fetchall()
            for pid, state in rows:
                if state == "planned":
                    drop_archive_of(db, pid)
                expire(db, pid, self._db.clock(), reason)
        if rows:
            self._retention.recount()
            self._db.archived()
        return len(rows)

    def agents_with_open(self) -> list[str]:
        rows = self._db.conn.execute(
            "SELECT DISTINCT agent FROM proposals WHERE state IN ('planned', 'sent')"
        )
        return [r[0] for r in rows]

    def counts(self, agent: str | None = None) -> dict[str, int]:
        sql = "SELECT state, COUNT(*) FROM proposals"
        args: tuple[Any, ...] = ()
        if agent is not None:
            sql += " WHERE agent = ?"
            args = (agent,)
        counts = dict.fromkeys(STATES, 0)
        counts.update({s: n for s, n in self._db.conn.execute(sql + " GROUP BY state", args)})
        return counts


def expire(db: sqlite3.Connection, proposal: str, now: float, reason: str) -> None:
    db.execute(
        "UPDATE proposals SET state = 'expired', updated = ?, reason = ? WHERE proposal = ?",
        (now, reason, proposal),
    )
