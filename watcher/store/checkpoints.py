"""Checkpoints: an agent's whole context at version V, with the side-effect epoch it declared
(saved durable: the commit is fsynced at level ``normal`` too)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgpack

from ipc.sections import Section
from watcher.store.codec import MAX_TEXT, pack
from watcher.store.database import Database
from watcher.store.records import CheckpointMeta, CorruptError, StoreError

_META = "name, session, version, epoch, tokens, sections, bytes, created, note"


class Checkpoints:
    def __init__(self, db: Database) -> None:
        self._db = db

    def save(
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
        body = pack([s.to_wire() for s in sections])
        meta = CheckpointMeta(
            name,
            session,
            version,
            epoch,
            sum(s.tokens for s in sections),
            len(sections),
            len(body),
            self._db.clock(),
            note,
        )
        with self._db.tx(durable=True) as db:
            exists = db.execute(
                "SELECT 1 FROM checkpoints WHERE agent = ? AND name = ?", (agent, name)
            ).fetchone()
            if exists and not overwrite:
                raise StoreError(f"checkpoint {name!r} exists; drop it first or save with overwrite")
            db.execute(
                f"INSERT OR REPLACE INTO checkpoints(agent, {_META}, body, sha256) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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

    def saved(self, agent: str) -> list[CheckpointMeta]:
        """The checkpoints ``agent`` saved, oldest first."""
        rows = self._db.conn.execute(
            f"SELECT {_META} FROM checkpoints WHERE agent = ? ORDER BY created, name", (agent,)
        )
        return [CheckpointMeta(*r) for r in rows]

    def get(self, agent: str, name: str) -> tuple[CheckpointMeta, list[Section]] | None:
        row = self._db.conn.execute(
            f"SELECT {_META}, body, sha256 FROM checkpoints WHERE agent = ? AND name = ?", (agent, name)
        ).fetchone()
        if row is None:
            return None
        body, digest = row[9], row[10]
        if hashlib.sha256(body).digest() != digest:
            raise CorruptError(f"checkpoint {name!r} of {agent!r} failed its checksum")
        sections = [Section.from_wire(w, MAX_TEXT) for w in msgpack.unpackb(body, raw=False)]
        return CheckpointMeta(*row[:9]), sections

    def drop(self, agent: str, name: str) -> bool:
        with self._db.tx() as db:
            n = db.execute("DELETE FROM checkpoints WHERE agent = ? AND name = ?", (agent, name)).rowcount
        return bool(n)
