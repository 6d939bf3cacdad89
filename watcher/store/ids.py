"""Ids the store hands out: archive refs (``a17``), digest ids (``compactd-d18``), proposal ids
(``p19``) are numbered from one counter in the database (table ``ids``), advanced in a
transaction. Two stores of one file (one after the other: the file is locked while open) never
hand out a number twice, and a restart continues after the last one handed out. The counter is
seeded past every number already stored when the schema migrates (v2) and at boot recovery."""

from __future__ import annotations

from watcher.store.database import Database
from watcher.store.schema import stored_floor


class Ids:
    def __init__(self, db: Database) -> None:
        self._db = db

    def take(self, *prefixes: str) -> list[str]:
        """One new id per prefix, numbered in order (one transaction for all of them)."""
        with self._db.tx() as db:
            db.execute("UPDATE ids SET last = last + ? WHERE one = 1", (len(prefixes),))
            last = int(db.execute("SELECT last FROM ids WHERE one = 1").fetchone()[0])
        first = last - len(prefixes) + 1
        return [f"{prefix}{first + i}" for i, prefix in enumerate(prefixes)]

    def floor(self) -> int:
        """The smallest number not yet used: past the counter and every number in a stored ref,
        proposal id or digest id."""
        return max(self._last() + 1, stored_floor(self._db.conn))

    def reserve_stored(self) -> None:
        """Advance the counter past every stored number (boot recovery, before it removes rows: the
        numbers of what it removes are not handed out again)."""
        floor = self.floor()
        with self._db.tx() as db:
            db.execute("UPDATE ids SET last = ? WHERE one = 1", (floor - 1,))

    def _last(self) -> int:
        return int(self._db.scalar("SELECT last FROM ids WHERE one = 1"))
