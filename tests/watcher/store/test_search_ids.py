"""Schema v2 on real SQLite files: archive search through the FTS5 index (the same hits as a scan,
kept in step on eviction and deletes), a file written by schema v1 migrated in place, and ids
numbered by the store across restarts."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ipc.protocol import Proposal
from ipc.sections import Section
from watcher.store import search as searching
from watcher.store.ids import BLOCK
from watcher.store.schema import MIGRATIONS, statements
from watcher.store.store import DB_NAME, SCHEMA_VERSION, Store

WORDS = ["Error", "error:", "ünïcödé", "ÜNÏ", "Traceback", "x\x00y", "🚀ok", "a.b", "PATH=", '"q"', "tab\tz"]


def open_store(tmp_path: Path, **kw: object) -> Store:
    return Store.open(tmp_path / DB_NAME, **kw)  # type: ignore[arg-type]


def scan(store: Store, agent: str, query: str) -> list[tuple[str, int]]:
    """What the search meant before the index: instr(lower(text), lower(query)), newest first."""
    rows = store.db.execute(
        "SELECT a.ref, o.pos FROM originals o JOIN archive a ON a.seq = o.seq "
        "WHERE o.agent = ? AND instr(lower(o.text), ?) > 0 ORDER BY o.seq DESC, o.pos",
        (agent, searching.ascii_lower(query)),
    )
    return [(r[0], r[1]) for r in rows]


def fts_rows(store: Store, needle: str) -> int:
    """Rows the index file holds with every trigram of ``needle``, once the indexer has caught up."""
    assert store.database.wait_indexed()
    expr = searching.match_expression(needle)
    sql = "SELECT f.rowid FROM fts.originals_fts f WHERE f.originals_fts MATCH ?"
    return len(store.database.search.execute(sql, (expr,)).fetchall())


def test_indexed_search_finds_exactly_what_a_scan_finds(tmp_path: Path) -> None:
    rnd = random.Random(7)
    store = open_store(tmp_path)
    for i in range(60):
        agent = "alice" if i % 3 else "bob"
        secs = [
            Section(
                f"s{i}-{j}", "tool_result", " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(0, 12)))
            )
            for j in range(rnd.randint(1, 4))
        ]
        store.archive.put(agent, "default", f"a{i}", secs)
    queries = [
        "error",
        "ERROR:",
        "ünï",
        "ÜNÏ",
        "x\x00y",
        "🚀o",
        "trace",
        "a.b",
        '"q"',
        "b tr",
        "nothing here",
    ]
    for q in queries:
        for agent in ("alice", "bob"):
            hits, more = store.archive.search(agent, q, limit=1000)
            assert [(h.ref, h.pos) for h in hits] == scan(store, agent, q), (q, agent)
            assert not more
            for h in hits:
                assert searching.ascii_lower(q) in searching.ascii_lower(h.snippet)
    # paging walks the same order
    full = scan(store, "alice", "err")
    pages = [store.archive.search("alice", "err", offset=o, limit=5) for o in range(0, len(full) + 5, 5)]
    assert [(h.ref, h.pos) for page, _ in pages for h in page] == full
    assert pages[0][1] and not pages[-1][1]
    store.close()


def test_short_queries_scan_the_newest_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path)
    for i in range(6):
        store.archive.put("a", "default", f"a{i}", (Section(f"s{i}", "user", f"entry {i} Qz"),))
    hits, _ = store.archive.search("a", "qz", limit=100)
    assert [h.ref for h in hits] == [f"a{i}" for i in range(5, -1, -1)]
    monkeypatch.setattr(searching, "SHORT_QUERY_ENTRIES", 2)
    hits, _ = store.archive.search("a", "qz", limit=100)
    assert [h.ref for h in hits] == ["a5", "a4"]  # 1-2 characters: only the newest entries
    hits, _ = store.archive.search("a", " qz", limit=100)  # 3 characters: the whole archive, by the index
    assert len(hits) == 6
    store.close()


def test_the_index_loses_what_eviction_and_deletes_remove(tmp_path: Path) -> None:
    store = open_store(tmp_path, retention_days=1)
    store.archive.put("a", "default", "a1", (Section("s1", "user", "needle in one"),))
    store.archive.put("a", "default", "a2", (Section("s2", "user", "needle in two"),))
    store.archive.put("a", "default", "a3", (Section("s3", "user", "needle in three"),))
    p = Proposal("p4", 1, ("s1",), (Section("d4", "digest", "d", tokens=1),), 10, 1, 10, ("a1",))
    store.proposals.record("a", "default", p, "deterministic")
    store.proposals.transition("a", "p4", "sent")
    store.proposals.transition("a", "p4", "acked")
    assert store.database.wait_indexed()
    assert fts_rows(store, "needle") == 3
    ev = store.retention.enforce(now=store.database.clock() + 3 * 86400)  # a1 evicted (a tombstone stays)
    assert ev.by_age == 1 and store.archive.entry("a", "a1") is not None
    assert store.archive.drop_unproposed("a", "a2")  # cascades to its originals
    assert fts_rows(store, "needle") == 1
    assert [h.ref for h in store.archive.search("a", "NEEDLE")[0]] == ["a3"]
    assert store.recover().orphan_archives == 1  # a3: no proposal refers to it
    assert fts_rows(store, "needle") == 0 and store.archive.search("a", "needle") == ([], False)
    assert store.integrity() == []
    store.close()


def write_v1(path: Path) -> None:
    """A store file as compactd wrote it before schema v2 (the v1 DDL, rows inserted as v1 did)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    version, script, _ = MIGRATIONS[0]
    assert version == 1
    for statement in statements(script):
        db.execute(statement)
    db.execute("INSERT INTO meta(key, value) VALUES ('created', '0'), ('id_floor', '12')")
    from watcher.store.codec import archive_rows

    for seq, (ref, text) in enumerate([("a3", "Old Traceback here"), ("a7", "older ERROR: disk full")], 1):
        enc = archive_rows([Section(f"s{seq}", "tool_result", text, tokens=4)])
        db.execute(
            "INSERT INTO archive(seq, ref, agent, session, created, sections, tokens, bytes) "
            "VALUES (?, ?, 'a', 'default', 1.0, 1, 4, ?)",
            (seq, ref, enc.bytes),
        )
        ((pos, sid, kind, attrs, sha),) = enc.rows
        db.execute(
            "INSERT INTO originals(seq, pos, agent, session, section_id, kind, text, attrs, sha256) "
            "VALUES (?, ?, 'a', 'default', ?, ?, ?, ?, ?)",
            (seq, pos, sid, kind, text, attrs, sha),
        )
    db.execute("PRAGMA user_version = 1")
    db.close()


def test_a_v1_file_is_migrated_and_searches(tmp_path: Path) -> None:
    write_v1(tmp_path / DB_NAME)
    old = Store.readonly(tmp_path / DB_NAME)  # a tool reading a file not yet migrated: a scan
    assert old.schema_version == 1 and not old.database.indexed
    assert [h.ref for h in old.archive.search("a", "error")[0]] == ["a7"]
    old.db.close()
    store = open_store(tmp_path)
    assert store.schema_version == SCHEMA_VERSION == 4 and store.database.indexed
    assert not store.db.execute("SELECT 1 FROM sqlite_master WHERE name LIKE 'originals_fts%'").fetchall()
    assert store.database.wait_indexed()  # v4's index file is built from the archive, by the indexer
    assert store.db.execute("SELECT seq, pos FROM fts_mark").fetchone() == (2, 0)
    assert fts_rows(store, "traceback") == 1
    assert [h.ref for h in store.archive.search("a", "ERROR: DISK")[0]] == ["a7"]
    assert [h.ref for h in store.archive.search("a", "old")[0]] == ["a7", "a3"]
    assert [r.section.text for r in store.archive.originals("a", "a3")] == ["Old Traceback here"]
    assert store.ids.take("a", "p") == ["a12", "p13"]  # past v1's id_floor and every stored number
    store.archive.put("a", "default", "a12", (Section("s9", "user", "new text after the migration"),))
    assert [h.ref for h in store.archive.search("a", "text after")[0]] == ["a12"]
    assert store.integrity() == []
    store.close()


def test_ids_continue_after_a_restart_and_never_repeat(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    assert store.ids.take("a", "compactd-d", "p") == ["a1", "compactd-d2", "p3"]
    assert store.ids.take("a", "p") == ["a4", "p5"]
    store.db.close()  # as a kill -9 would: no clean close
    assert store.database.lock_fd is not None
    import os

    os.close(store.database.lock_fd)
    store = open_store(tmp_path)
    store.recover()
    b = BLOCK  # the kill lost the rest of the first block: skipped, never handed out
    assert store.ids.take("p") == [f"p{b + 1}"]
    store.close()  # a clean close gives the rest of its block back
    # another process opens the same file, takes ids, and exits; this one continues after them
    code = (
        "import sys; from watcher.store.store import Store; s = Store.open(sys.argv[1]); "
        "print(' '.join(s.ids.take('a', 'p'))); s.close()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / DB_NAME)], check=False, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [f"a{b + 2}", f"p{b + 3}"]
    store = open_store(tmp_path)
    assert store.ids.floor() == b + 4
    assert store.ids.take("a") == [f"a{b + 4}"]
    assert store.ids.floor() == b + 5  # within the block: the next number it hands out
    assert [store.ids.take("p")[0] for _ in range(BLOCK)][-1] == f"p{2 * b + 4}"  # past one block
    store.close()
    store = open_store(tmp_path)
    assert store.ids.floor() == 2 * b + 5
    store.close()


def test_two_stores_number_independently_and_a_memory_store_too(tmp_path: Path) -> None:
    one, two = Store.open(tmp_path / "one.db"), Store.open(tmp_path / "two.db")
    assert one.ids.take("p") == ["p1"] and two.ids.take("p") == ["p1"]  # each file its own numbers
    assert one.ids.take("p") == ["p2"]
    one.close()
    two.close()
    assert Store.memory().ids.take("a", "p") == ["a1", "p2"]
