"""Ids the store hands out: archive refs (``a17``), digest ids (``compactd-d18``), proposal ids
(``p19``) are numbered from one counter in the database (table ``ids``). Two stores of one file
(one after the other: the file is locked while open) never hand out a number twice, and a restart
continues after the last number reserved. The counter is seeded past every number already stored
when the schema migrates (v2) and at boot recovery.

Numbers are reserved in blocks of :data:`BLOCK`: one transaction advances the counter by a block,
and the numbers are handed out from memory. A compaction takes three numbers; a transaction of its
own for them was four statements on the event loop, each of which gives up the interpreter lock
(docs/ARCHITECTURE.md, "The serving loop's C calls"). A clean close gives the unused rest of the
block back; a crash skips it (numbers are never repeated, and may have gaps)."""

from __future__ import annotations

from typing import Final

from watcher.store.database import Database
from watcher.store.schema import stored_floor

BLOCK: Final = 64  # numbers reserved per transaction


class Ids:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._next = 0  # the numbers [_next, _end) are reserved and not yet handed out
        self._end = 0

    def take(self, *prefixes: str) -> list[str]:
        """One new id per prefix, numbered in order (from the reserved block; a transaction only
        when it runs out)."""
        n = len(prefixes)
        if self._end - self._next < n:
            size = max(BLOCK, n)
            with self._db.tx() as db:
                db.execute("UPDATE ids SET last = last + ? WHERE one = 1", (size,))
                last = int(db.execute("SELECT last FROM ids WHERE one = 1").fetchone()[0])
            self._next, self._end = last - size + 1, last + 1
        first = self._next
        self._next += n
        return [f"{prefix}{first + i}" for i, prefix in enumerate(prefixes)]

    def floor(self) -> int:
        """The smallest number not yet handed out: past every number in a stored ref, proposal id
        or digest id, and past the counter (or, within a reserved block, its next number)."""
        held = self._next if self._next < self._end else self._last() + 1
        return max(held, stored_floor(self._db.conn))

    def reserve_stored(self) -> None:
        """Advance the counter past every stored number (boot recovery, before it removes rows: the
        numbers of what it removes are not handed out again). A block held is dropped (the next
        take reserves a fresh one past the counter)."""
        self._next = self._end = 0
        floor = self.floor()
        with self._db.tx() as db:
            db.execute("UPDATE ids SET last = ? WHERE one = 1", (floor - 1,))

    def give_back(self) -> None:
        """Return the unused rest of the block to the counter (a clean close), if nothing has moved
        the counter since it was reserved."""
        if self._next >= self._end:
            return
        with self._db.tx() as db:
            db.execute("UPDATE ids SET last = ? WHERE one = 1 AND last = ?", (self._next - 1, self._end - 1))
        self._next = self._end = 0

    def _last(self) -> int:
        return int(self._db.scalar("SELECT last FROM ids WHERE one = 1"))
