"""kill -9 at the worst moments, on a real daemon subprocess: between "marked sent" and the wire,
while an ACK is handled, while summarizing. After each restart the agent reattaches and resyncs
by itself, and the store and the agent's context agree: nothing lost, nothing half-applied. Then
the crash benchmark itself, for a few cycles."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ipc.client import AgentLink, LinkError
from ipc.protocol import Proposal
from ipc.sections import Section
from summarizer.digest import approx_tokens
from tests.fixtures.daemon import wait_until
from watcher.eval.harness import DaemonProcess
from watcher.store.crashpoints import ENV
from watcher.store.store import DB_NAME

BUDGET = 2000
FILLER = "Traceback (most recent call last): File 'app.py', line 12, in main; ValueError: bad input; "


@contextlib.contextmanager
def readonly(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(f"file:{tmp_path / 'state' / DB_NAME}?mode=ro", uri=True)
    try:
        yield db
    finally:
        db.close()


def states(tmp_path: Path) -> dict[str, str]:
    with readonly(tmp_path) as db:
        return dict(db.execute("SELECT proposal, state FROM proposals").fetchall())


class Daemons:
    """Start, crash and restart daemons on one state directory and socket."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.config = tmp_path / "c.toml"
        self.config.write_text("[daemon]\nheartbeat_s = 0.3\n")
        self.n = 0
        self.proc: DaemonProcess | None = None

    async def start(self, crashpoint: str = "") -> DaemonProcess:
        self.n += 1
        env = {ENV: crashpoint} if crashpoint else None
        self.proc = DaemonProcess(
            self.tmp, str(self.config), model=False, log_name=f"daemon{self.n}.log", env=env
        )
        await self.proc.wait_ready()
        return self.proc

    async def died(self, limit_s: float = 20.0) -> bool:
        proc = self.proc
        assert proc is not None
        try:
            await wait_until(lambda: proc.proc.poll() is not None, limit_s, "the daemon dies")
        except AssertionError:
            return False
        return proc.proc.returncode == -9  # SIGKILL

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


@pytest.fixture
async def daemons(tmp_path: Path) -> AsyncIterator[Daemons]:
    d = Daemons(tmp_path)
    try:
        yield d
    finally:
        d.stop()


def sec(sid: str, i: int) -> Section:
    text = f"{sid} run {i}: " + FILLER * 6
    return Section(sid, "tool_result", text, tokens=approx_tokens(text))


async def push(
    link: AgentLink, prefix: str, n: int, applied: dict[str, list[Section]], d: DaemonProcess | None = None
) -> None:
    """Append n sections, applying every proposal that arrives; stop early if ``d`` dies."""
    for i in range(n):
        if d is not None and d.proc.poll() is not None:
            return
        with contextlib.suppress(LinkError):  # the daemon may be dead or just restarted
            await link.append(sec(f"{prefix}{i}", i), wait=True)
        await drain(link, applied)


async def drain(link: AgentLink, applied: dict[str, list[Section]], wait_s: float = 0.05) -> None:
    """Apply what arrives, waiting up to ``wait_s`` for a first one (a job may take a moment)."""
    try:
        got = [await asyncio.wait_for(link.proposals.get(), wait_s)]
    except TimeoutError:
        return
    while not link.proposals.empty():
        got.append(link.proposals.get_nowait())
    for p in got:
        originals = [s for i in p.replaces if (s := link.context.get(i)) is not None]
        if await link.apply(p):
            applied[p.proposal] = originals


async def resynced(link: AgentLink, before: int) -> None:
    async def check() -> bool:
        if link.reattaches <= before:
            return False
        st = (await link.status())["agents"][0]
        return bool(st["synced"] and st["version"] == link.context.version)

    await wait_until(check, 10, "the agent reattaches and resyncs on its own")


async def intact(link: AgentLink, applied: dict[str, list[Section]], proposals: dict[str, Proposal]) -> None:
    for pid, originals in applied.items():
        ref = proposals[pid].archive[0]
        assert (await link.recall(ref))[ref] == originals, f"originals of {pid} not intact"


async def test_kill_between_sent_and_the_wire_reoffers_the_proposal(daemons: Daemons, tmp_path: Path) -> None:
    d = await daemons.start("before_send:1")
    applied: dict[str, list[Section]] = {}
    async with AgentLink(d.endpoint, agent="k1", budget=BUDGET, reserve=0.2, timeout_s=2) as link:
        await push(link, "a", 200, applied, d)
        assert await daemons.died(), "the crash point was not reached"
        assert not applied and link.proposals.empty()  # it never left
        lost = [p for p, s in states(tmp_path).items() if s == "sent"]
        assert len(lost) == 1  # committed as sent before the kill: archive first
        before = link.reattaches
        await daemons.start()
        await resynced(link, before)
        p = await asyncio.wait_for(link.proposals.get(), 5)  # re-offered, same id and digest
        assert p.proposal == lost[0] and p.base == link.context.version
        originals = [s for i in p.replaces if (s := link.context.get(i)) is not None]
        assert await link.apply(p)
        await link.status()  # the ACK is processed before this answer
        assert states(tmp_path)[p.proposal] == "acked"
        assert (await link.recall(p.archive[0]))[p.archive[0]] == originals


async def test_kill_during_ack_settles_as_acked_after_restart(daemons: Daemons, tmp_path: Path) -> None:
    d = await daemons.start("ack:1")
    applied: dict[str, list[Section]] = {}
    proposals: dict[str, Proposal] = {}
    async with AgentLink(d.endpoint, agent="k2", budget=BUDGET, reserve=0.2, timeout_s=2) as link:
        for i in range(200):
            if d.proc.poll() is not None:
                break
            with contextlib.suppress(LinkError):
                await link.append(sec(f"b{i}", i), wait=True)
            with contextlib.suppress(TimeoutError):
                p = await asyncio.wait_for(link.proposals.get(), 0.05)
                proposals[p.proposal] = p
                originals = [s for x in p.replaces if (s := link.context.get(x)) is not None]
                assert await link.apply(p)
                applied[p.proposal] = originals
                break
        assert await daemons.died(), "the crash point was not reached"
        (pid,) = applied
        assert states(tmp_path)[pid] == "sent"  # the agent applied it; the daemon died on the ACK
        before = link.reattaches
        await daemons.start()
        await resynced(link, before)
        assert states(tmp_path)[pid] == "acked"  # settled from the agent's context
        await intact(link, applied, proposals)
        # and compaction goes on, with ids that never repeat
        more: dict[str, list[Section]] = {}
        await push(link, "c", 30, more)
        await link.status()  # every ACK sent so far is processed before this answer
        assert more and not set(more) & set(applied)
        assert all(states(tmp_path)[p] == "acked" for p in more)


async def test_kill_while_summarizing_leaves_no_orphans(daemons: Daemons, tmp_path: Path) -> None:
    d = await daemons.start("archived:2")
    applied: dict[str, list[Section]] = {}
    async with AgentLink(d.endpoint, agent="k3", budget=BUDGET, reserve=0.2, timeout_s=2) as link:
        await push(link, "d", 200, applied, d)
        assert await daemons.died(), "the crash point was not reached"
        orphan_sql = "SELECT ref FROM archive WHERE ref NOT IN (SELECT ref FROM proposals)"
        with readonly(tmp_path) as db:
            orphans = [r for (r,) in db.execute(orphan_sql)]
        assert len(orphans) == 1  # the entry being summarized when the kill came
        before = link.reattaches
        await daemons.start()
        await resynced(link, before)
        with readonly(tmp_path) as db:
            left = {r for (r,) in db.execute("SELECT ref FROM archive")}
            (integrity,) = db.execute("PRAGMA integrity_check").fetchone()
        assert orphans[0] not in left and integrity == "ok"  # boot recovery removed it
        assert "planned" not in states(tmp_path).values()
        await push(link, "e", 20, applied)
        await link.status()  # every ACK sent so far is processed before this answer
        assert all(states(tmp_path)[p] == "acked" for p in applied)


@pytest.mark.slow
def test_crash_benchmark_cli(tmp_path: Path) -> None:
    out = tmp_path / "crash.json"
    run = subprocess.run(
        [
            *(sys.executable, "-m", "watcher", "bench", "crash", "--cycles", "3", "--no-model"),
            *("--seed", "7", "--json", str(out), "--workdir", str(tmp_path / "w")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["cycles"] == 3 and sum(r["kills"].values()) == 3
    assert r["lost_originals"] == 0 and r["originals_checked"] > 0
    assert r["half_applied"] == 0 and r["proposals_checked"] > 0
    assert r["integrity_ok"] and r["integrity_checks"] == 4
    assert r["resynced_agents"] == r["resync_expected"] == 9
    assert r["cross_agent_refused"] == r["cross_agent_attempts"] > 0 and not r["cross_agent_leaks"]
    assert r["restores_ok"] == r["epoch_guardrail_ok"] == 3
    assert r["lost_checkpoints"] == 0 and r["goals_met"]


async def test_kill_between_the_index_and_the_store_commits_leaves_search_exact(
    daemons: Daemons, tmp_path: Path
) -> None:
    """kill -9 after the search index committed a slice in its own file and before the store's
    marks say so (watcher.store.fts): the next daemon takes the index's marks, finds every archived
    section by search, and indexes the rest."""
    d = await daemons.start("indexed:3")
    applied: dict[str, list[Section]] = {}
    async with AgentLink(d.endpoint, agent="k4", budget=BUDGET, reserve=0.2, timeout_s=2) as link:
        await push(link, "f", 200, applied, d)
        assert await daemons.died(), "the crash point was not reached"
        with readonly(tmp_path) as db:
            store_mark = db.execute("SELECT seq FROM fts_mark").fetchone()[0]
        index = sqlite3.connect(f"file:{tmp_path / 'state' / DB_NAME}.fts?mode=ro", uri=True)
        index_mark = index.execute("SELECT seq FROM mark").fetchone()[0]
        index.close()
        assert index_mark > store_mark  # the kill came between the two files' commits
        before = link.reattaches
        await daemons.start()
        await resynced(link, before)
        with readonly(tmp_path) as db:  # (boot recovery removed the entry being summarized)
            (before_kill,) = db.execute("SELECT count(*) FROM archive WHERE seq <= ?", (index_mark,))
        assert before_kill[0] >= 1
        for batch in range(10):  # archived after the index's mark: the rest, for the new daemon
            with readonly(tmp_path) as db:
                refs = [r for (r,) in db.execute("SELECT ref FROM archive")]
            if len(refs) > before_kill[0]:
                break
            await push(link, f"g{batch}-", 20, applied)
        assert before_kill[0] < len(refs)
        for ref in refs:  # every entry archived before the kill: its first section, by search
            (first,) = (await link.recall(ref))[ref][:1]
            hits, _ = await link.search(first.text[:14], limit=500)
            assert ref in {h["ref"] for h in hits}, ref
        await wait_until(lambda: indexed_all(tmp_path), 10, "the index catches up")


def indexed_all(tmp_path: Path) -> bool:
    with readonly(tmp_path) as db:
        (pending,) = db.execute(
            "SELECT count(*) FROM originals WHERE (seq, pos) > (SELECT seq, pos FROM fts_mark)"
        ).fetchone()
    return int(pending) == 0
