"""The schema and its migrations.

The schema is versioned with ``PRAGMA user_version`` and upgraded by :data:`MIGRATIONS` in one
transaction each (the SQL script, then the step's Python part); a file written by a newer compactd
is refused rather than misread.

* v1 — agents, sessions, archive + originals, proposals, digests, checkpoints, meta.
* v2 — ``ids``: the counter archive refs, proposal ids and digest ids are numbered from (seeded
  past every number already stored); ``originals_fts``: an FTS5 index of the archived texts for
  search (see :mod:`watcher.store.search`), built from the rows already there and kept in step
  by triggers on ``originals`` (inserts, evictions, cascading deletes). The triggers call an SQL
  function compactd registers on its connections (``compactd_fts_text``): another program may
  read the file, but must not write ``originals``.
* v3 — the index is no longer written inside the archive's insert: ``fts_indexed`` holds the last
  originals row ``(seq, pos)`` indexed, and watcher.store.fts indexes the rows after it from a
  thread (the insert trigger is gone: moving the mark forward indexes the rows it passes, by a
  trigger); the delete and update triggers touch the index only for rows up to that mark.
  Search reads the index up to the mark and scans the rows after it.
* v4 — the index moves to a file of its own beside the store (watcher.store.fts: ``PATH.fts``), so
  that writing it never holds the store's write lock: the daemon's transactions no longer wait for
  the indexer (docs/BENCHMARKS.md, stop 33). The store keeps the marks search reads (``fts_mark``:
  the rows up to ``seq, pos`` are in the index; none after ``upto_seq, upto_pos`` is) and, for a
  row deleted or changed once it may be in the index, the text the index must be told to forget
  (``fts_gone``, filled by triggers; the indexer applies and clears it). ``index_id`` names the
  index file that belongs to this store. v3's index is dropped; the indexer builds the new one
  from the archive in the background, and search scans what it has not reached meanwhile.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable
from typing import Final

from watcher.store.records import StoreError

SCHEMA_VERSION: Final = 4

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

# The FTS rowid of originals row (seq, pos): seq * FTS_POS + (FTS_POS - 1 - pos), so that the
# index's rowid order, descending, is newest entry first and, within an entry, position order
# (search reads it in that order and stops at the page it needs).
FTS_POS: Final = 1 << 24


def fts_rowid(row: str = "") -> str:
    """The SQL of an originals row's FTS rowid (``row``: "new." or "old." in a trigger)."""
    return f"{row}seq * {FTS_POS} + {FTS_POS - 1} - {row}pos"


_V2: Final = f"""
CREATE TABLE ids (
    one  INTEGER PRIMARY KEY CHECK (one = 1),
    last INTEGER NOT NULL                 -- the last number handed out (watcher.store.ids)
);
INSERT INTO ids(one, last) VALUES (1, 0);

-- contentless (the text stays in originals only), trigram (substrings of >= 3 characters),
-- detail=none (no positions: a query is the AND of its trigrams, every hit is checked on the text);
-- what it indexes is compactd_fts_text(text): the tokenizer stops at a NUL, so NULs become spaces
CREATE VIRTUAL TABLE originals_fts USING fts5(
    text, content = '', tokenize = 'trigram', detail = 'none', columnsize = 0
);
CREATE TRIGGER originals_fts_insert AFTER INSERT ON originals BEGIN
    INSERT INTO originals_fts(rowid, text) VALUES ({fts_rowid("new.")}, compactd_fts_text(new.text));
END;
CREATE TRIGGER originals_fts_delete AFTER DELETE ON originals BEGIN
    INSERT INTO originals_fts(originals_fts, rowid, text)
    VALUES ('delete', {fts_rowid("old.")}, compactd_fts_text(old.text));
END;
CREATE TRIGGER originals_fts_update AFTER UPDATE OF text ON originals BEGIN
    INSERT INTO originals_fts(originals_fts, rowid, text)
    VALUES ('delete', {fts_rowid("old.")}, compactd_fts_text(old.text));
    INSERT INTO originals_fts(rowid, text) VALUES ({fts_rowid("new.")}, compactd_fts_text(new.text));
END;
INSERT INTO originals_fts(rowid, text) SELECT {fts_rowid()}, compactd_fts_text(text) FROM originals;
"""

# Rows up to fts_indexed's (seq, pos) are in the index: indexed in that order by watcher.store.fts,
# and an archive seq is never reused (AUTOINCREMENT), so a row inserted later sorts after the mark.
_INDEXED: Final = "(SELECT seq, pos FROM fts_indexed)"
_V3: Final = f"""
CREATE TABLE fts_indexed (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    seq INTEGER NOT NULL,
    pos INTEGER NOT NULL
);
INSERT INTO fts_indexed(one, seq, pos)
SELECT 1, COALESCE(MAX(seq), 0), COALESCE((SELECT MAX(pos) FROM originals o
    WHERE o.seq = (SELECT MAX(seq) FROM originals)), 0) FROM originals;
-- advancing the mark indexes the rows it passes: one UPDATE statement, so the indexer holds the
-- write lock only inside SQLite (the GIL released), never while it waits for the GIL or the CPU
CREATE TRIGGER fts_indexed_advance AFTER UPDATE ON fts_indexed BEGIN
    INSERT INTO originals_fts(rowid, text)
    SELECT {fts_rowid()},
        CASE WHEN instr(CAST(text AS BLOB), x'00') > 0 THEN compactd_fts_text(text) ELSE text END
    FROM originals WHERE (seq, pos) > (old.seq, old.pos) AND (seq, pos) <= (new.seq, new.pos);
END;
DROP TRIGGER originals_fts_insert;
DROP TRIGGER originals_fts_delete;
DROP TRIGGER originals_fts_update;
CREATE TRIGGER originals_fts_delete AFTER DELETE ON originals
WHEN (old.seq, old.pos) <= {_INDEXED} BEGIN
    INSERT INTO originals_fts(originals_fts, rowid, text)
    VALUES ('delete', {fts_rowid("old.")}, compactd_fts_text(old.text));
END;
CREATE TRIGGER originals_fts_update AFTER UPDATE OF text ON originals
WHEN (old.seq, old.pos) <= {_INDEXED} BEGIN
    INSERT INTO originals_fts(originals_fts, rowid, text)
    VALUES ('delete', {fts_rowid("old.")}, compactd_fts_text(old.text));
    INSERT INTO originals_fts(rowid, text) VALUES ({fts_rowid("new.")}, compactd_fts_text(new.text));
END;
"""

_MARK: Final = "(SELECT upto_seq, upto_pos FROM fts_mark)"
_V4: Final = f"""
DROP TRIGGER originals_fts_delete;
DROP TRIGGER originals_fts_update;
DROP TABLE fts_indexed;
DROP TABLE originals_fts;
CREATE TABLE fts_mark (
    one      INTEGER PRIMARY KEY CHECK (one = 1),
    seq      INTEGER NOT NULL,          -- every originals row up to (seq, pos) is in the index
    pos      INTEGER NOT NULL,
    upto_seq INTEGER NOT NULL,          -- no row after (upto_seq, upto_pos) is
    upto_pos INTEGER NOT NULL,
    gone     INTEGER NOT NULL,          -- the last fts_gone id the index has applied
    index_id TEXT NOT NULL              -- the index file's name for this store (watcher.store.fts)
);
INSERT INTO fts_mark VALUES (1, 0, 0, 0, 0, 0, lower(hex(randomblob(16))));
CREATE TABLE fts_gone (
    id   INTEGER PRIMARY KEY AUTOINCREMENT,
    seq  INTEGER NOT NULL,
    pos  INTEGER NOT NULL,
    text TEXT NOT NULL                  -- as the index holds it (a contentless index forgets by text)
);
CREATE TRIGGER fts_mark_gone AFTER UPDATE OF gone ON fts_mark BEGIN
    DELETE FROM fts_gone WHERE id <= new.gone;
END;
CREATE TRIGGER originals_gone AFTER DELETE ON originals WHEN (old.seq, old.pos) <= {_MARK} BEGIN
    INSERT INTO fts_gone(seq, pos, text) VALUES (old.seq, old.pos, old.text);
END;
CREATE TRIGGER originals_changed AFTER UPDATE OF text ON originals WHEN (old.seq, old.pos) <= {_MARK} BEGIN
    INSERT INTO fts_gone(seq, pos, text) VALUES (old.seq, old.pos, old.text);
END;
"""

_ID_NUMBER: Final = re.compile(r"(\d+)$")


def stored_floor(db: sqlite3.Connection) -> int:
    """One more than the largest number in any stored ref, proposal or digest id (and than v1's
    meta ``id_floor``, the numbers of rows boot recovery removed)."""
    row = db.execute("SELECT value FROM meta WHERE key = 'id_floor'").fetchone()
    best = int(row[0]) - 1 if row else 0
    for sql in (
        "SELECT ref FROM archive",
        "SELECT proposal FROM proposals",
        "SELECT digest_id FROM digests",
    ):
        for (value,) in db.execute(sql):
            m = _ID_NUMBER.search(value)
            if m:
                best = max(best, int(m[1]))
    return best + 1


def _created(db: sqlite3.Connection) -> None:
    db.execute("INSERT INTO meta(key, value) VALUES ('created', ?)", (str(time.time()),))


def _seed_ids(db: sqlite3.Connection) -> None:
    db.execute("UPDATE ids SET last = ? WHERE one = 1", (stored_floor(db) - 1,))


def _nothing(db: sqlite3.Connection) -> None:
    """v3 and v4 are SQL only."""


# (version, SQL script, Python step): applied in order, each in one transaction with its user_version bump.
MIGRATIONS: Final[tuple[tuple[int, str, Callable[[sqlite3.Connection], None]], ...]] = (
    (1, _V1, _created),
    (2, _V2, _seed_ids),
    (3, _V3, _nothing),
    (4, _V4, _nothing),
)


def fts_text(text: str) -> str:
    """What the index holds of a text: FTS5's trigram tokenizer stops at a NUL character, so each
    becomes a space (a query's trigrams with a NUL are not looked up; hits are checked on the text)."""
    return text.replace("\x00", " ") if "\x00" in text else text


def register_functions(db: sqlite3.Connection) -> None:
    """The SQL function the index triggers call (``compactd_fts_text``): on every connection that
    writes the store."""
    db.create_function("compactd_fts_text", 1, fts_text, deterministic=True)


def migrate(db: sqlite3.Connection, where: str) -> int:
    """Bring the schema to SCHEMA_VERSION; returns the version found. StoreError if it is newer.

    Every connection that writes the store comes here first: it also registers the SQL function
    the triggers call (register_functions)."""
    register_functions(db)
    found = int(db.execute("PRAGMA user_version").fetchone()[0])
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"{where}: the store has schema version {found}, newer than this compactd's "
            f"{SCHEMA_VERSION}; run a newer compactd (or move the file away)"
        )
    for version, script, step in MIGRATIONS:
        if version <= found:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in statements(script):
                db.execute(statement)
            step(db)
            db.execute(f"PRAGMA user_version = {version}")
        except sqlite3.OperationalError as exc:
            db.execute("ROLLBACK")
            if "fts5" in str(exc):
                raise StoreError(
                    f"{where}: this SQLite ({sqlite3.sqlite_version}) lacks FTS5: {exc}"
                ) from exc
            raise
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    return found


def statements(script: str) -> list[str]:
    """Split a migration script into complete statements (a trigger's body holds several ';')."""
    out: list[str] = []
    pending = ""
    for line in script.splitlines():
        if line.strip().startswith("--"):
            continue
        pending += line + "\n"
        if sqlite3.complete_statement(pending):
            out.append(pending.strip())
            pending = ""
    if pending.strip():
        out.append(pending.strip())
    return out
