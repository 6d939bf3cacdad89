"""Schema v3 on real SQLite files: the search index follows the archive from a thread of its own
(watcher.store.fts). Search finds what is archived before it is indexed, in the scan's order,
whatever the indexer's mark; deleting a row the index never held leaves the index sound; a store
closed with rows unindexed (as a crash leaves it) catches up when it is opened again."""

from __future__ import annotations

import random
import threading
from pathlib import Path

from ipc.sections import Section
from tests.watcher.store.test_search_ids import scan
from watcher.store import search as searching
from watcher.store.fts import index_slice, pending_rows
from watcher.store.store import DB_NAME, Store

WORDS = ["Error", "error:", "ünïcödé", "Traceback", "x\x00y", "a.b", "PATH=", "needle", "hay"]


def fts_sound(store: Store) -> bool:
    try:
        store.db.execute("INSERT INTO originals_fts(originals_fts) VALUES ('integrity-check')")
    except Exception:
        return False
    return True


def stop_indexer(store: Store) -> None:
    """What a crash right after the archive's commits leaves: rows the index does not hold yet."""
    indexer = store.database.indexer
    assert indexer is not None
    indexer.close()
    store.database.indexer = None


def fill(store: Store, rnd: random.Random, entries: range) -> None:
    for i in entries:
        secs = [
            Section(f"s{i}-{j}", "tool_result", " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(0, 9))))
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
        if not index_slice(store.db, max_rows=1):
            break
        marks += 1
        assert pending_rows(store.db) == total - marks
    assert marks == total and fts_sound(store)
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
    n = again.db.execute(
        "SELECT count(*) FROM originals_fts WHERE originals_fts MATCH ?",
        (searching.match_expression("needle"),),
    ).fetchone()[0]
    assert n == 1
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
