"""Archive search: the archived sections of one agent whose text contains a string (ASCII
case-insensitive, as SQLite's ``lower``), newest first.

A query of 3 or more characters goes through the FTS5 index ``originals_fts`` (watcher.store.fts:
a file of its own, attached as ``fts`` to ``Database.search``; trigram tokenizer, no positions):
the rows holding every trigram of the query are candidates, read
newest first, and each is checked on its text (``instr(lower(text), query)``), so the hits are
exactly those of a scan. A query of 1 or 2 characters has no trigram: it is a scan of the agent's
newest :data:`SHORT_QUERY_ENTRIES` archive entries (such a string is in nearly every section, so
the page fills from the newest ones; older entries are not searched); so is a longer one whose every
trigram holds a NUL character (the index holds NULs as spaces). A read-only view of a file not yet
migrated to v4, or without its index file, scans everything, as before the index.

The index follows the archive (watcher.store.fts): search reads it for the rows up to the store's
mark (``fts_mark``), and the rows archived after it, not indexed yet (a few, for a moment), are
scanned in the same statement, so a section is found as soon as it is archived. The store's
snapshot is read before the index's (SQLite opens a statement's read transactions in the order of
the attached databases, ``main`` first), and the mark is published after the index commits, so
the index holds every row up to the mark that the statement reads; rows past the mark that the
index already holds are left to the scan.

Cost: without positions the index stays small (~70 % of the text's size; with them, ~3x), but a
query made of common trigrams (two frequent words) has most sections as candidates and costs
about what the scan did; a query with one rare part is answered from the index alone.
"""

from __future__ import annotations

from typing import Any, Final

from watcher.store.database import Database
from watcher.store.schema import FTS_POS

SHORT_QUERY_ENTRIES: Final = 2000
MAX_TRIGRAMS: Final = 32  # of a long query: enough to be selective (every candidate is checked anyway)

_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_MARK: Final = "(SELECT seq, pos FROM main.fts_mark)"
_COLUMNS: Final = "a.ref, o.session, o.pos, o.section_id, o.kind, a.created, o.text, o.seq"


def ascii_lower(s: str) -> str:
    return s.translate(_LOWER)


def match_expression(needle: str) -> str:
    """The FTS5 query for rows holding every trigram of ``needle`` ("" if it has none)."""
    grams = list(dict.fromkeys(needle[i : i + 3] for i in range(len(needle) - 2)))
    grams = [g for g in grams if "\x00" not in g]  # FTS5 reads its query as a C string
    if len(grams) > MAX_TRIGRAMS:
        step = len(grams) / MAX_TRIGRAMS
        grams = [grams[int(i * step)] for i in range(MAX_TRIGRAMS)] + [grams[-1]]
    return " AND ".join('"' + g.replace('"', '""') + '"' for g in grams)


def rows(
    db: Database, agent: str, needle: str, session: str | None, offset: int, limit: int
) -> list[tuple[Any, ...]]:
    """``agent``'s sections containing ``needle`` (ASCII-lowercased), newest first: ``limit`` rows
    from ``offset``, each ``(ref, session, pos, section_id, kind, created, text, seq)``.

    Where the index answers, it is read for the rows up to ``fts_mark`` and the rows after it
    (archived, not indexed yet: watcher.store.fts) are scanned; both in one statement (one snapshot
    of the store: a row the indexer takes meanwhile is seen once), merged here in the order of the
    scan (seq descending, then position)."""
    sql, args = statement(db, agent, needle, session)
    if not (db.indexed and match_expression(needle)):
        return db.search.execute(sql + " LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
    # the rows past the mark: a range of the primary key (+o.agent: not the agent's index, which
    # would read every row of the agent's archive and its text)
    tail = (
        f"SELECT {_COLUMNS} FROM originals o JOIN archive a ON a.seq = o.seq "
        f"WHERE o.seq >= (SELECT seq FROM main.fts_mark) AND (o.seq, o.pos) > {_MARK} "
        "AND +o.agent = ? AND instr(lower(o.text), ?) > 0"
    )
    tail_args: list[Any] = [agent, needle]
    if session is not None:
        tail += " AND o.session = ?"
        tail_args.append(session)
    both = f"SELECT * FROM ({sql} LIMIT ?) UNION ALL SELECT * FROM ({tail})"
    found = db.search.execute(both, [*args, offset + limit, *tail_args]).fetchall()
    found.sort(key=lambda r: (-r[7], r[2]))
    return found[offset : offset + limit]


def statement(db: Database, agent: str, needle: str, session: str | None) -> tuple[str, list[Any]]:
    """The SELECT of ``agent``'s sections containing ``needle`` (ASCII-lowercased), newest first,
    without its LIMIT and OFFSET; its rows are ``(ref, session, pos, section_id, kind, created, text,
    seq)``. Through the index: only the rows up to the mark (:func:`rows` adds the rest)."""
    match = match_expression(needle) if db.indexed else ""
    args: list[Any]
    if match:
        sql = (
            f"SELECT {_COLUMNS} FROM fts.originals_fts f "
            f"JOIN originals o ON o.seq = f.rowid / {FTS_POS} "
            f"AND o.pos = {FTS_POS - 1} - f.rowid % {FTS_POS} "
            "JOIN archive a ON a.seq = o.seq "
            f"WHERE f.originals_fts MATCH ? AND (o.seq, o.pos) <= {_MARK} "
            "AND o.agent = ? AND instr(lower(o.text), ?) > 0"
        )
        args = [match, agent, needle]
        order = " ORDER BY f.rowid DESC"
    elif db.indexed:  # 1-2 characters: the newest entries, a range of the primary key (+: not by agent)
        sql = (
            f"SELECT {_COLUMNS} FROM originals o JOIN archive a ON a.seq = o.seq "
            "WHERE o.seq >= ? AND +o.agent = ? AND instr(lower(o.text), ?) > 0"
        )
        args = [_window(db, agent), agent, needle]
        order = " ORDER BY o.seq DESC, o.pos"
    else:  # no index (a read-only view of an older file, or no index file): the scan of v1
        sql = (
            f"SELECT {_COLUMNS} FROM originals o JOIN archive a ON a.seq = o.seq "
            "WHERE o.agent = ? AND instr(lower(o.text), ?) > 0"
        )
        args = [agent, needle]
        order = " ORDER BY o.seq DESC, o.pos"
    if session is not None:
        sql += " AND o.session = ?"
        args.append(session)
    return sql + order, args


def snippet(text: str, needle: str, width: int, context_chars: int) -> str:
    """``context_chars`` either side of the first ``needle`` (``width`` characters) in ``text``."""
    at = ascii_lower(text).find(needle)
    lo, hi = max(0, at - context_chars), min(len(text), at + width + context_chars)
    return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")


def _window(db: Database, agent: str) -> int:
    """The smallest archive seq among the agent's newest SHORT_QUERY_ENTRIES entries."""
    row = db.search.execute(
        "SELECT seq FROM archive WHERE agent = ? ORDER BY seq DESC LIMIT 1 OFFSET ?",
        (agent, SHORT_QUERY_ENTRIES - 1),
    ).fetchone()
    return int(row[0]) if row else 0
