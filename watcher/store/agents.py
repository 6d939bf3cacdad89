"""Agents and sessions: who attached, how they authenticated, when."""

from __future__ import annotations

from watcher.store.database import Database


class Agents:
    def __init__(self, db: Database) -> None:
        self._db = db

    def touch(self, agent: str, session: str, auth: str) -> None:
        """Record an attach of ``agent`` (session ``session``, authenticated by ``auth``)."""
        now = self._db.clock()
        with self._db.tx() as db:
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
        rows = self._db.conn.execute(
            "SELECT session FROM sessions WHERE agent = ? ORDER BY created", (agent,)
        )
        return [r[0] for r in rows]
