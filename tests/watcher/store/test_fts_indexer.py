"""Schema v4 on real SQLite files: the search index, a file of its own, follows the archive from a
thread of its own (watcher.store.fts). Search finds what is archived before it is indexed, in the
scan's order, whatever the indexer's mark; deleting a row the index never held leaves the index
sound; a store closed with rows unindexed (as a crash leaves it) catches up when it is opened
again; the indexer never takes the store's write lock for longer than a mark's update."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from ipc.sections import Section
from tests.watcher.store.test_search_ids import scan
from watcher.store import search as searching
from watcher.store.fts import index_path, index_slice, open_index, pending_rows
from watcher.store.schema import fts_rowid
from watcher.store.store import DB_NAME, Store

WORDS = ["Error", "error:", "ünïcödé", "Traceback", "x\x00y", "a.b", "PATH=", "needle", "hay"]


def fts_sound(store: Store) -> bool:
    try:
        store.database.search.execute(
            "INSERT INTO fts.originals_fts(originals_fts) VALUES ('integrity-check')"
        )
    except Exception:
        return False
    return True


def indexed(store: Store, needle: str) -> int:
    """Rows the index file holds with every trigram of ``needle``."""
    return int(
        store.database.search.execute(
            "SELECT count(*) FROM fts.originals_fts f WHERE f.originals_fts MATCH ?",
            (searching.match_expression(needle),),
        ).fetchone()[0]
    )


def stop_indexer(store: Store) -> None:
    """What a crash right after the archive's commits leaves: rows the index does not hold yet."""
    indexer = store.database.indexer
    assert indexer is not None
    indexer.close()
    store.database.indexer = None


def fill(store: Store, rnd: random.Random, entries: range) -> None:
    for i in entries:
        secs = [
            Section(f"s{i}-{j}", "tool_result", "row " + " ".join(rnd.choices(WORDS, k=rnd.randint(0, 9))))
            for j in range(rnd.randint(1, 4))
        ]
        store.archive.put("alice" if i % 3 else "bob", "default", f"a{i}", secs)


def test_search_is_exact_at_every_mark_of_the_indexer(tmp_path: Path) -> None:
    rnd = random.Random(3)
    store = Store.open(tmp_path / DB_NAME)
    stop_indexer(store)
    fill(store, rnd, range(25))
    total = pending_rows(store.db)
    assert total == store.db.execute("SELECT count(*) FROM originals").fetchone()[0] > 25
    conn = open_index(store.path, "normal")
    assert conn is not None
    queries = ["error", "needle", "ünï", "x\x00y", "a.b", "trace", "nothing here"]
    marks = 0
    while True:  # one row at a time: marks in the middle of an entry too
        for q in queries:
            for agent in ("alice", "bob"):
                hits, more = store.archive.search(agent, q, limit=1000)
                assert [(h.ref, h.pos) for h in hits] == scan(store, agent, q), (q, agent, marks)
                assert not more
        full = scan(store, "alice", "err")
        pages = [store.archive.search("alice", "err", offset=o, limit=4) for o in range(0, len(full) + 4, 4)]
        assert [(h.ref, h.pos) for page, _ in pages for h in page] == full
        if not index_slice(conn, max_rows=1):
            break
        marks += 1
        assert pending_rows(store.db) == total - marks
    assert marks == total and fts_sound(store)
    conn.close()
    store.close()


def test_deleting_rows_the_index_never_held_leaves_it_sound(tmp_path: Path) -> None:
    store = Store.open(tmp_path / DB_NAME, retention_days=1)
    store.archive.put("a", "default", "a1", (Section("s1", "user", "needle one"),))
    assert store.database.wait_indexed()
    stop_indexer(store)
    store.archive.put("a", "default", "a2", (Section("s2", "user", "needle two"),))
    store.archive.put("a", "default", "a3", (Section("s3", "user", "needle three"),))
    assert pending_rows(store.db) == 2
    assert store.archive.drop_unproposed("a", "a2")  # never indexed: the trigger must not touch the index
    assert store.archive.drop_unproposed("a", "a1")  # indexed: it leaves the index
    assert fts_sound(store)
    assert [h.ref for h in store.archive.search("a", "NEEDLE")[0]] == ["a3"]
    store.close()
    again = Store.open(tmp_path / DB_NAME)  # the next daemon's indexer takes what was left
    assert again.database.wait_indexed()
    assert pending_rows(again.db) == 0 and fts_sound(again)
    assert indexed(again, "needle") == 1
    assert [h.ref for h in again.archive.search("a", "needle three")[0]] == ["a3"]
    assert again.integrity() == []
    again.close()


def test_the_indexer_keeps_up_with_the_archive_and_a_reader_sees_every_hit(tmp_path: Path) -> None:
    """The archive commits while the indexer works on its own connection and a tool searches
    from a third (read-only): each of the reader's snapshots is exact, every row ends up indexed once."""
    rnd = random.Random(11)
    before = {t for t in threading.enumerate() if t.name == "compactd-fts-indexer"}
    store = Store.open(tmp_path / DB_NAME)
    mine = {t for t in threading.enumerate() if t.name == "compactd-fts-indexer"} - before
    assert len(mine) == 1
    reader = Store.readonly(tmp_path / DB_NAME)
    errors: list[BaseException] = []
    big = "Traceback line with a needle\n" * 4000  # ~120 KB: two slices

    def archive() -> None:
        try:
            for i in range(40):
                store.archive.put("a", "default", f"b{i}", (Section(f"t{i}", "tool_result", big + str(i)),))
            fill(store, rnd, range(5))
        except BaseException as exc:  # reported below
            errors.append(exc)

    writer = threading.Thread(target=archive)
    writer.start()
    snapshots = 0
    while writer.is_alive() or snapshots == 0:
        reader.db.execute("BEGIN")  # one snapshot for the search and the scan it is checked against
        try:
            hits, _ = reader.archive.search("a", "a needle", limit=1000)
            assert [(h.ref, h.pos) for h in hits] == scan(reader, "a", "a needle")
        finally:
            reader.db.execute("COMMIT")
        snapshots += 1
    writer.join()
    assert not errors
    assert store.database.wait_indexed()
    assert pending_rows(store.db) == 0 and fts_sound(store)
    indexer = store.database.indexer
    rows = store.db.execute("SELECT count(*) FROM originals").fetchone()[0]
    assert indexer is not None and indexer.rows == rows and indexer.failures == 0
    reader.db.close()
    store.close()
    assert not any(t.is_alive() for t in mine)


def index_rowids(store: Store) -> set[int]:
    """Every rowid the index file holds: every text of these tests starts with "row"."""
    rows = store.database.search.execute(
        "SELECT f.rowid FROM fts.originals_fts f WHERE f.originals_fts MATCH ?", ('"row"',)
    )
    return {int(r[0]) for r in rows}


def found(store: Store, agent: str, query: str) -> list[tuple[str, int]]:
    return [(h.ref, h.pos) for h in store.archive.search(agent, query, limit=1000)[0]]


def live_rowids(store: Store) -> set[int]:
    rows = store.db.execute(f"SELECT {fts_rowid()} FROM originals")
    return {int(r[0]) for r in rows}


def test_the_index_is_a_file_of_its_own_and_never_holds_the_stores_write_lock(tmp_path: Path) -> None:
    """While something holds the index file's write lock (as the indexer does while it indexes a
    slice), the daemon's transactions on the store go through at once; the index catches up after."""
    store = Store.open(tmp_path / DB_NAME)
    assert Path(index_path(store.path)).is_file()
    holder = sqlite3.connect(index_path(store.path), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the index file's write lock, held
    t0 = time.monotonic()
    for i in range(20):
        section = Section(f"s{i}", "tool_result", f"row needle number {i}")
        store.archive.put("a", "default", f"r{i}", (section,))
    assert time.monotonic() - t0 < 2.0  # (the busy timeout is 5 s: no put waited for the lock)
    assert store.database.gate.waited_s < 0.5
    assert len(store.archive.search("a", "needle")[0]) == 20  # found by the scan meanwhile
    assert pending_rows(store.db) == 20
    holder.execute("ROLLBACK")
    holder.close()
    assert store.database.wait_indexed()
    assert pending_rows(store.db) == 0 and index_rowids(store) == live_rowids(store)
    assert [h.ref for h in store.archive.search("a", "number 7")[0]] == ["r7"]
    store.close()


def test_rows_deleted_while_the_indexer_works_leave_the_index_exactly_the_archive(tmp_path: Path) -> None:
    """Entries archived and dropped from another thread while the indexer runs: at the end the
    index holds exactly the rows still archived (a dropped row it held is forgotten once, one it
    never held is not touched), and it is sound."""
    rnd = random.Random(5)
    store = Store.open(tmp_path / DB_NAME)
    kept: list[str] = []
    for i in range(300):
        ref = f"e{i}"
        body = "row " + " ".join(rnd.choice(WORDS[:4]) for _ in range(rnd.randint(1, 400)))
        sections = tuple(Section(f"{ref}-{j}", "tool_result", f"{body}{j}") for j in range(rnd.randint(1, 3)))
        store.archive.put("a", "default", ref, sections)
        kept.append(ref)
        if rnd.random() < 0.4:  # drop a recent one: indexed, being indexed, or not yet
            victim = kept.pop(rnd.randrange(max(0, len(kept) - 5), len(kept)))
            assert store.archive.drop_unproposed("a", victim)
    assert store.database.wait_indexed()
    assert index_rowids(store) == live_rowids(store) and fts_sound(store)
    assert store.db.execute("SELECT count(*) FROM fts_gone").fetchone()[0] == 0  # applied, cleared
    hits = {h.ref for h in store.archive.search("a", "error:", limit=10_000)[0]}
    assert hits == {ref for (ref,) in store.db.execute("SELECT ref FROM archive")} & hits
    store.close()


def test_a_crash_between_the_index_commit_and_its_publication_is_mended_at_open(tmp_path: Path) -> None:
    """The index commits its slice, the store's marks are not updated (the daemon dies between the
    two files' commits): the next open takes the index's marks, and search is exact throughout."""
    store = Store.open(tmp_path / DB_NAME)
    stop_indexer(store)
    fill(store, random.Random(8), range(12))
    conn = open_index(store.path, "normal")
    assert conn is not None
    publications = 0

    def dies_at_the_second_publication() -> contextlib.AbstractContextManager[object]:
        nonlocal publications
        publications += 1
        if publications == 2:
            raise RuntimeError("killed")
        return contextlib.nullcontext()

    with pytest.raises(RuntimeError):
        index_slice(conn, max_rows=5, gate=dies_at_the_second_publication)
    index_mark = conn.execute("SELECT seq, pos FROM fts.mark").fetchone()
    assert store.db.execute("SELECT seq, pos FROM fts_mark").fetchone() == (0, 0) != index_mark
    for q in ("error", "needle"):
        assert found(store, "alice", q) == scan(store, "alice", q)
    conn.close()
    store.close()
    again = Store.open(tmp_path / DB_NAME)
    assert again.database.wait_indexed()
    assert pending_rows(again.db) == 0 and index_rowids(again) == live_rowids(again) and fts_sound(again)
    for q in ("error", "needle", "trace"):
        assert found(again, "bob", q) == scan(again, "bob", q)
    again.close()


def test_an_index_file_that_is_not_the_stores_is_rebuilt(tmp_path: Path) -> None:
    """Another store's index file, or none: the index is built again from the archive."""
    one = Store.open(tmp_path / "one" / DB_NAME)
    other = Store.open(tmp_path / "other" / DB_NAME)
    fill(one, random.Random(1), range(10))
    fill(other, random.Random(2), range(30))
    assert one.database.wait_indexed() and other.database.wait_indexed()
    one.close()
    other.close()
    shutil.copy(index_path(other.path), index_path(one.path))  # (both closed: no WAL left behind)
    again = Store.open(tmp_path / "one" / DB_NAME)
    assert again.database.wait_indexed()
    assert index_rowids(again) == live_rowids(again) and fts_sound(again)
    again.close()
    os.remove(index_path(again.path))
    fresh = Store.open(tmp_path / "one" / DB_NAME)
    assert fresh.database.wait_indexed()
    assert index_rowids(fresh) == live_rowids(fresh)
    for q in ("error", "ünï"):
        assert found(fresh, "alice", q) == scan(fresh, "alice", q)
    fresh.close()


def test_the_indexer_thread_yields_the_cpu_to_the_daemon(tmp_path: Path) -> None:
    """The indexer runs below the daemon's priority (fts.INDEX_NICE, Linux: per thread): under load
    the index waits, not the serving loop; it still indexes what was archived."""
    from watcher.store.fts import INDEX_NICE

    store = Store.open(tmp_path / DB_NAME)
    try:
        indexer = store.database.indexer
        assert indexer is not None
        store.archive.put("a", "default", "r1", (Section("s1", "user", "a needle in the hay"),))
        assert store.database.wait_indexed(30)
        tid = indexer._thread.native_id
        assert tid is not None
        mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        assert os.getpriority(os.PRIO_PROCESS, tid) == min(19, mine + INDEX_NICE)
        assert indexed(store, "needle") == 1
    finally:
        store.close()
