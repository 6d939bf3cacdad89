"""The durable store on real SQLite files: schema and migrations, exact bytes, checksums, the
proposal state machine, boot recovery, retention, scope, locking, integrity."""

from __future__ import annotations

import sqlite3
import stat
import threading
import time
from pathlib import Path

import pytest

from ipc.protocol import Proposal
from ipc.sections import Section
from watcher.store import search as searching
from watcher.store.fts import Indexer, pending_rows
from watcher.store.store import (
    DB_NAME,
    SCHEMA_VERSION,
    WAL_CHECKPOINT_BYTES,
    WAL_INLINE_FACTOR,
    ArchiveView,
    CorruptError,
    Store,
    StoreError,
    TransitionError,
    archive_rows,
    connect_readonly,
    section_digest,
)

TRICKY = [
    Section("s1", "tool_result", "line\r\nwith CRLF\x00and a NUL\tand tabs  \n", tokens=9),
    Section("s2", "assistant", "ünïcödé — ≠ 𝄞 🚀 \u200b zero-width", role="assistant", priority="high"),
    Section(
        "s3",
        "tool_call",
        "",
        pinned=True,
        group="g1",
        ts=1718000000.25,
        meta={"tool": "bash", "exit": "0", "ünï": "✓"},
    ),
    Section("s4", "user", "x" * 200_000, priority="low", tokens=50_000),
]


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def open_store(tmp_path: Path, **kw: object) -> Store:
    return Store.open(tmp_path / DB_NAME, **kw)  # type: ignore[arg-type]


def proposal(pid: str, ref: str, ids: tuple[str, ...], base: int = 1) -> Proposal:
    digest = Section(f"d-{pid}", "digest", f"digest of {ref}", tokens=5, meta={"archive": ref})
    return Proposal(pid, base, ids, (digest,), 100, 5, 100, (ref,))


def sent(store: Store, agent: str, pid: str, ref: str, originals: tuple[Section, ...]) -> Proposal:
    store.archive.put(agent, "default", ref, originals)
    p = proposal(pid, ref, tuple(s.id for s in originals))
    store.proposals.record(agent, "default", p, "deterministic")
    store.proposals.transition(agent, pid, "sent")
    return p


def test_new_store_is_wal_versioned_and_private(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    assert store.schema_version == SCHEMA_VERSION
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
    assert stat.S_IMODE((tmp_path / DB_NAME).stat().st_mode) == 0o600
    store.close()
    again = open_store(tmp_path)  # reopening migrates nothing and keeps the data
    assert again.schema_version == SCHEMA_VERSION
    again.close()


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    open_store(tmp_path).close()
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer than this compactd"):
        open_store(tmp_path)


def test_garbage_file_is_refused_clearly(tmp_path: Path) -> None:
    (tmp_path / DB_NAME).write_bytes(b"this is not sqlite at all " * 100)
    with pytest.raises(StoreError, match="not a usable SQLite database"):
        open_store(tmp_path)


def test_one_daemon_per_state_directory(tmp_path: Path) -> None:
    first = open_store(tmp_path)
    with pytest.raises(StoreError, match="in use by another compactd"):
        open_store(tmp_path)
    first.close()
    open_store(tmp_path).close()  # the lock goes with the store


def test_originals_come_back_byte_for_byte_after_reopen(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.archive.put("a", "default", "a1", TRICKY)
    store.close()
    store = open_store(tmp_path)
    back = [r.section for r in store.archive.originals("a", "a1")]
    assert back == TRICKY
    assert [section_digest(s) for s in back] == [section_digest(s) for s in TRICKY]
    assert store.archive.entry("a", "a1") is not None
    assert store.archive.entry("a", "a1").tokens == sum(s.tokens for s in TRICKY)  # type: ignore[union-attr]
    page = store.archive.originals("a", "a1", offset=1, limit=2)
    assert [r.pos for r in page] == [1, 2] and page[0].section == TRICKY[1]
    store.close()


def test_a_damaged_row_fails_its_checksum(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.archive.put("a", "default", "a1", TRICKY[:2])
    store.db.execute("UPDATE originals SET text = 'tampered' WHERE pos = 0")
    with pytest.raises(CorruptError, match="checksum"):
        store.archive.originals("a", "a1")
    store.close()


def test_integrity_check_refuses_a_corrupt_file(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for i in range(200):
        store.archive.put("a", "default", f"a{i}", (Section(f"s{i}", "user", f"text {i} " * 300),))
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    path = tmp_path / DB_NAME
    data = bytearray(path.read_bytes())
    page = 4096
    for p in range(3, len(data) // page, 3):  # scribble over every third page's cell area
        data[p * page + 200 : p * page + 1200] = b"\xa5" * 1000
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError):
        open_store(tmp_path)


def test_proposal_state_machine(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    p = sent(store, "a", "p1", "a1", TRICKY[:2])
    assert store.proposals.state_of("a", "p1") == "sent"
    assert [o.proposal for o in store.proposals.open("a")] == [p]
    with pytest.raises(TransitionError):
        store.proposals.transition("a", "p1", "planned")
    with pytest.raises(TransitionError):
        store.proposals.transition("b", "p1", "acked")  # another agent's proposal does not exist for b
    assert store.proposals.transition("a", "p1", "acked", version=7) == "sent"
    for to in ("acked", "nacked", "expired", "sent"):
        with pytest.raises(TransitionError):
            store.proposals.transition("a", "p1", to)  # terminal
    # planned -> expired: it never left, so its archive entry goes with it
    store.archive.put("a", "default", "a2", TRICKY[2:3])
    store.proposals.record("a", "default", proposal("p2", "a2", ("s3",)), "deterministic")
    with pytest.raises(TransitionError):
        store.proposals.transition("a", "p2", "acked")
    held = store.retention.archived_bytes
    store.proposals.transition("a", "p2", "expired")
    assert store.archive.entry("a", "a2") is None
    assert store.retention.archived_bytes < held  # the dropped entry's bytes are no longer counted
    assert store.retention.archived_bytes == store.db.execute("SELECT SUM(bytes) FROM archive").fetchone()[0]
    assert store.proposals.counts("a") == {"planned": 0, "sent": 0, "acked": 1, "nacked": 0, "expired": 1}
    # the digest is recorded with its source references
    row = store.db.execute("SELECT ref, source_ids FROM digests WHERE digest_id = 'd-p1'").fetchone()
    assert row == ("a1", '["s1", "s2"]')
    store.close()


def test_boot_recovery_after_a_crash(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    sent(store, "a", "p1", "a1", TRICKY[:1])  # sent: stays open until the agent resumes
    store.archive.put("a", "default", "a2", TRICKY[1:2])  # planned: never left
    store.proposals.record("a", "default", proposal("p2", "a2", ("s2",)), "deterministic")
    store.archive.put("a", "default", "a3", TRICKY[2:3])  # orphan: killed while summarizing
    store.db.close()  # as a kill -9 would: no clean close, the lock released by the kernel
    import os

    assert store.database.lock_fd is not None
    os.close(store.database.lock_fd)
    store = open_store(tmp_path)
    report = store.recover()
    assert (report.expired_planned, report.orphan_archives, report.open_sent) == (1, 1, 1)
    assert store.proposals.state_of("a", "p1") == "sent" and store.proposals.state_of("a", "p2") == "expired"
    assert store.archive.entry("a", "a1") is not None
    assert store.archive.entry("a", "a2") is None and store.archive.entry("a", "a3") is None
    assert store.ids.floor() == 4  # a3 is gone, but its number is not handed out again
    store.close()


def test_next_id_floor_covers_every_kind_of_id(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    sent(store, "a", "p41", "a40", TRICKY[:1])
    assert store.ids.floor() == 42
    store.close()


def test_retention_by_age_never_touches_open_proposals(tmp_path: Path) -> None:
    clock = Clock()
    store = open_store(tmp_path, retention_days=1, clock=clock)
    sent(store, "a", "p1", "a1", TRICKY[:1])
    store.proposals.transition("a", "p1", "acked")
    sent(store, "a", "p2", "a2", TRICKY[1:2])  # still pending
    clock.t += 2 * 86400
    sent(store, "a", "p3", "a3", TRICKY[2:3])
    store.proposals.transition("a", "p3", "acked")
    ev = store.retention.enforce()
    assert (ev.by_age, ev.by_size) == (1, 0)
    e1 = store.archive.entry("a", "a1")
    assert e1 is not None and e1.evicted is not None and "retention_days" in e1.evict_reason
    assert store.archive.originals("a", "a1") == []
    assert store.archive.originals("a", "a2") and store.archive.originals("a", "a3")
    store.close()


def test_size_cap_evicts_nacked_first_then_oldest(tmp_path: Path) -> None:
    store = open_store(tmp_path, max_archive_mb=1)
    big = "y" * 300_000
    for i in range(1, 4):  # a1, a2, a3 acked (oldest first)
        sent(store, "a", f"p{i}", f"a{i}", (Section(f"s{i}", "user", big),))
        store.proposals.transition("a", f"p{i}", "acked")
    sent(store, "a", "p4", "a4", (Section("s4", "user", big),))
    store.proposals.transition("a", "p4", "nacked")  # the agent kept these in its context
    sent(store, "a", "p5", "a5", (Section("s5", "user", big),))  # pending: never evicted
    # 5 x 300 kB > 1 MiB: put_archive applied the cap on its own
    gone = [r for r in ("a1", "a2", "a3", "a4", "a5") if store.archive.entry("a", r).evicted]  # type: ignore[union-attr]
    assert gone == ["a1", "a4"]
    assert store.retention.archived_bytes <= 1024 * 1024
    store.close()


def test_every_read_is_scoped_to_the_agent(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    sent(store, "alice", "p1", "a1", (Section("s1", "user", "alice's secret plan"),))
    store.checkpoints.save("alice", "default", "cp", TRICKY[:1], version=3, epoch=0)
    assert store.archive.entry("bob", "a1") is None
    assert store.archive.originals("bob", "a1") == []
    assert store.archive.by_section("bob", "s1") == [] and store.archive.by_section("bob", "d-p1") == []
    assert store.archive.search("bob", "secret") == ([], False)
    assert store.checkpoints.get("bob", "cp") is None and store.checkpoints.saved("bob") == []
    assert not store.checkpoints.drop("bob", "cp")
    assert store.proposals.open("bob") == []
    with pytest.raises(TransitionError):
        store.proposals.transition("bob", "p1", "acked")
    # alice sees her own, by ref, section id, digest id and search
    assert store.archive.by_section("alice", "s1")[0].section.text == "alice's secret plan"
    assert store.archive.by_section("alice", "d-p1")[0].ref == "a1"
    hits, more = store.archive.search("alice", "SECRET")
    assert [h.section_id for h in hits] == ["s1"] and not more and "secret" in hits[0].snippet
    view = ArchiveView(store.archive, "bob", "default")
    assert "a1" not in view and len(view) == 0
    store.close()


def test_checkpoints_round_trip_and_refuse_duplicates(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    meta = store.checkpoints.save("a", "s1", "before-refactor", TRICKY, version=12, epoch=3, note="n")
    assert (meta.version, meta.epoch, meta.sections) == (12, 3, len(TRICKY))
    with pytest.raises(StoreError, match="exists"):
        store.checkpoints.save("a", "s1", "before-refactor", TRICKY[:1], version=13, epoch=3)
    store.close()
    store = open_store(tmp_path)
    found = store.checkpoints.get("a", "before-refactor")
    assert found is not None and found[1] == TRICKY and found[0].note == "n"
    store.checkpoints.save("a", "s2", "before-refactor", TRICKY[:1], version=13, epoch=4, overwrite=True)
    assert [m.version for m in store.checkpoints.saved("a")] == [13]
    assert store.checkpoints.drop("a", "before-refactor") and store.checkpoints.saved("a") == []
    store.close()


def test_the_sync_point_fsyncs_only_at_level_normal(tmp_path: Path) -> None:
    for level, syncs in (("normal", 1), ("full", 0), ("extra", 0), ("off", 0)):
        store = Store.open(tmp_path / f"{level}.db", synchronous=level)
        sent(store, "a", "p1", "a1", TRICKY[:1])
        store.sync_wal()  # the server calls it between "sent" and the send
        assert store.database.syncs == syncs, level
        assert store.db.execute("PRAGMA synchronous").fetchone()[0] == (
            "off",
            "normal",
            "full",
            "extra",
        ).index(level)
        store.close()


def test_rows_encoded_beforehand_store_the_same_bytes(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.archive.put("a", "default", "a1", TRICKY)
    store.archive.put("a", "default", "a2", TRICKY, archive_rows(TRICKY))
    one, two = store.archive.entry("a", "a1"), store.archive.entry("a", "a2")
    assert one is not None and two is not None
    assert (one.sections, one.tokens, one.bytes) == (two.sections, two.tokens, two.bytes)
    rows = "SELECT pos, section_id, kind, text, attrs, sha256 FROM originals WHERE seq = ? ORDER BY pos"
    seqs = [r[0] for r in store.db.execute("SELECT seq FROM archive ORDER BY seq")]
    assert store.db.execute(rows, (seqs[0],)).fetchall() == store.db.execute(rows, (seqs[1],)).fetchall()
    assert [r.section for r in store.archive.originals("a", "a2")] == TRICKY
    assert store.retention.archived_bytes == 2 * one.bytes
    store.close()


async def test_archive_view_put_is_committed_when_it_returns(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    view = ArchiveView(store.archive, "a", "default")
    await view.put("a1", tuple(TRICKY))
    other = connect_readonly(tmp_path / DB_NAME)  # another connection sees it: committed
    try:
        assert other.execute("SELECT sections FROM archive WHERE ref = 'a1'").fetchone() == (len(TRICKY),)
    finally:
        other.close()
    assert view["a1"] == tuple(TRICKY)
    store.close()


def fill(store: Store, refs: range, gap_s: float) -> int:
    """Archive entries ``refs`` of ~100 KB, ``gap_s`` apart; returns the largest WAL size seen."""
    wal = Path(f"{store.path}-wal")
    biggest = 0
    for i in refs:
        text = f"{i} " + "a line of tool output that goes to the archive\n" * 2000
        store.archive.put("a", "default", f"a{i}", (Section(f"s{i}", "tool_result", text),))
        biggest = max(biggest, wal.stat().st_size)
        time.sleep(gap_s)
    return biggest


# A checkpoint copies no frame past the oldest open read: the bound races the threads' speed. On a
# loaded machine (beside another test worker, or two busy loops: 3 failures of 3) the search
# indexer's thread holds its read of the store across the fill's back-to-back commits (short of
# CPU or of the GIL, it seems: closing the indexer ends it), every inline PASSIVE checkpoint stops
# at its frame, and the WAL reached 33-36 MB (8x WAL_CHECKPOINT_BYTES) before one completed. Alone
# the bound holds.
@pytest.mark.serial
def test_the_wal_is_checkpointed_by_a_thread_and_stays_bounded(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    assert store.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0  # not inside a commit
    # ~12 MB in commits with gaps (the event loop's idle time): the thread checkpoints, and the
    # WAL restarts (truncated) after each complete checkpoint
    biggest = fill(store, range(120), 0.02)
    assert store.database.wal_checkpoints >= 2
    assert store.database.checkpointer is not None and store.database.checkpointer.inline == 0
    assert biggest < WAL_INLINE_FACTOR * WAL_CHECKPOINT_BYTES
    # back to back, no gap for the thread's checkpoint to complete in: the commit checkpoints
    # itself once the WAL is WAL_INLINE_FACTOR times the size, as SQLite's own would have
    biggest = fill(store, range(120, 370), 0.0)
    assert biggest < (WAL_INLINE_FACTOR + 1) * WAL_CHECKPOINT_BYTES
    store.close()
    assert not Path(f"{tmp_path / DB_NAME}-wal").exists()  # the last connection checkpointed it, as before
    store = open_store(tmp_path)
    assert store.integrity() == []
    assert len(store.archive.refs("a")) == 370 and store.archive.originals("a", "a369")[
        0
    ].section.text.startswith("369 ")
    store.close()


@pytest.mark.serial
def test_the_indexer_waits_for_a_due_checkpoint_but_an_idle_daemon_does_not_hold_it(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    db = store.database
    assert db.indexer is not None and db.checkpointer is not None
    db.indexer.close()  # archive with no indexer until the WAL holds a due checkpoint's worth
    db.indexer = None
    wal, i = Path(f"{store.path}-wal"), 0
    while wal.stat().st_size < WAL_CHECKPOINT_BYTES:
        fill(store, range(i, i + 1), 0.0)
        i += 1
    # the daemon goes idle; an indexer starts with every row pending: its first slice waits for
    # the checkpoint the idle WAL lets complete, and goes on; its commits restart the WAL and
    # truncate it (its connection, too, is set up for the checkpointer), so the daemon's next
    # commit finds nothing due
    db.indexer = Indexer.start(store.path, db.synchronous, db.checkpointer)
    assert db.indexer is not None and db.wait_indexed(30)
    assert pending_rows(store.db) == 0
    assert db.checkpointer.deferred >= 1 and db.checkpointer.complete >= 1
    assert db.checkpointer.inline == 0 and db.indexer.failures == 0
    assert wal.stat().st_size < WAL_CHECKPOINT_BYTES
    assert len(searching.rows(db, "a", "tool output", None, 0, 1000)) == i
    store.close()


def test_close_stops_the_checkpoint_thread(tmp_path: Path) -> None:
    before = {t for t in threading.enumerate() if t.name == "compactd-wal-checkpoint"}
    store = open_store(tmp_path)
    mine = {t for t in threading.enumerate() if t.name == "compactd-wal-checkpoint"} - before
    assert len(mine) == 1
    store.close()
    assert not any(t.is_alive() for t in mine)
    assert Store.memory().database.wal_checkpoints == 0  # no file, no thread


def test_stats_counts_are_read_at_most_once_a_ttl_and_say_their_age(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """STATUS asks for the store's figures many times a second under load; the counts are scans
    (O(archive)), so they are read again only when COUNTS_TTL_S has passed. The threads' figures
    are read at every call."""
    import watcher.store.store as module

    store = open_store(tmp_path)
    monkeypatch.setattr(module, "COUNTS_TTL_S", 3600.0)
    first = store.stats()
    assert first["archive_entries"] == 0 and first["counts_age_s"] == 0
    sent(store, "a", "p1", "r1", (Section("x1", "user", "hello"),))
    cached = store.stats()
    assert cached["archive_entries"] == 0 and cached["proposals"]["sent"] == 0  # as counted before
    assert cached["counts_age_s"] >= 0 and cached["archived_bytes"] > 0  # (kept incrementally: current)
    assert store.database.wait_indexed()
    assert store.stats()["indexed_rows"] == 1  # the thread's figures: current
    monkeypatch.setattr(module, "COUNTS_TTL_S", 0.0)
    fresh = store.stats()
    assert fresh["archive_entries"] == 1 and fresh["proposals"]["sent"] == 1 and fresh["counts_age_s"] == 0
    store.close()


def test_archived_section_counts_follow_every_change(tmp_path: Path) -> None:
    """The per-agent count STATUS shows is read once per change (Archive.sections): after a put, a
    dropped entry, an eviction by the size cap and an expired proposal's entry it is what SQL says."""
    store = open_store(tmp_path, max_archive_mb=1)

    def truth(agent: str) -> int:
        sql = "SELECT COALESCE(SUM(sections), 0) FROM archive WHERE agent = ? AND evicted IS NULL"
        return int(store.db.execute(sql, (agent,)).fetchone()[0])

    def check() -> None:
        for agent in ("a", "b"):
            assert store.archive.sections(agent) == truth(agent)

    big = "y" * 300_000
    sent(store, "a", "p1", "a1", (Section("s1", "user", big), Section("s1b", "user", "z")))
    sent(store, "b", "q1", "b1", (Section("t1", "user", "small"),))
    check()
    assert store.archive.sections("a") == 2
    store.archive.put("b", "default", "b2", (Section("t2", "user", "x"), Section("t3", "user", "y")))
    check()
    assert store.archive.sections("b") == 3
    assert ArchiveView(store.archive, "b", "default").section_count() == 3
    assert store.archive.drop_unproposed("b", "b2")  # no proposal refers to it
    check()
    store.proposals.transition("a", "p1", "acked")
    for i in range(2, 5):  # 4 x 300 kB > 1 MiB: the cap evicts a1, then a2 (the oldest acked)
        sent(store, "a", f"p{i}", f"a{i}", (Section(f"s{i}", "user", big),))
        store.proposals.transition("a", f"p{i}", "acked")
        check()
    assert store.archive.entry("a", "a1").evicted  # type: ignore[union-attr]
    store.archive.put("b", "default", "b3", (Section("t4", "user", "w"),))
    store.proposals.record("b", "default", proposal("q3", "b3", ("t4",)), "deterministic")
    check()
    store.proposals.expire_open("b")  # planned, never sent: its entry goes
    check()
    assert store.archive.sections("b") == 1
    store.close()


def test_originals_inserted_several_rows_per_statement_come_back_in_order(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    for n in (1, 3, 64, 127):
        secs = tuple(Section(f"s{n}-{i}", "tool_result", f"output {i} of {n}") for i in range(n))
        del statements[:]
        store.archive.put("a", "default", f"a{n}", secs)
        inserts = [s for s in statements if s.startswith("INSERT INTO originals")]
        assert len(inserts) == bin(n).count("1")  # 127 rows: 64 + 32 + 16 + 8 + 4 + 2 + 1
        assert [r.section for r in store.archive.originals("a", f"a{n}")] == list(secs)
        assert [r.pos for r in store.archive.originals("a", f"a{n}")] == list(range(n))
    store.db.set_trace_callback(None)
    assert store.integrity() == []
    store.close()
