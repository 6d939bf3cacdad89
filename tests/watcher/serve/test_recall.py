"""RECALL over a real daemon (no model: the digests are not the point): by archive ref, by section
and digest id, paged, searched; and `compactd recall` on the state directory, daemon up or down."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ipc.client import AgentLink, LinkError
from ipc.protocol import Proposal
from ipc.sections import Section
from summarizer.digest import approx_tokens
from watcher.eval.harness import DaemonProcess

BUDGET = 2000
FILLER = "the quick brown fox jumps over the lazy dog while the build runs its tests; "


@pytest.fixture
async def nomodel(tmp_path: Path) -> AsyncIterator[DaemonProcess]:
    proc = DaemonProcess(tmp_path, None, model=False)
    try:
        await proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def sec(sid: str, text: str, kind: str = "tool_result") -> Section:
    return Section(sid, kind, text, tokens=approx_tokens(text))


async def settle(link: AgentLink, applied: list[tuple[Proposal, list[Section]]]) -> None:
    """Apply what arrives until the daemon has nothing running or pending for us."""
    for _ in range(100):
        while not link.proposals.empty():
            await apply(link, link.proposals.get_nowait(), applied)
        st = (await link.status())["agents"][0]
        if not st["compacting"] and not st["pending_proposals"] and link.proposals.empty():
            return
        with contextlib.suppress(TimeoutError):
            await apply(link, await asyncio.wait_for(link.proposals.get(), 0.2), applied)


async def apply(link: AgentLink, p: Proposal, applied: list[tuple[Proposal, list[Section]]]) -> None:
    originals = [s for i in p.replaces if (s := link.context.get(i)) is not None]
    if await link.apply(p):
        applied.append((p, originals))


async def fill(link: AgentLink, prefix: str, n: int, words: int) -> list[tuple[Proposal, list[Section]]]:
    applied: list[tuple[Proposal, list[Section]]] = []
    for i in range(n):
        await link.append(sec(f"{prefix}{i}", f"{prefix} item {i}: " + FILLER * words), wait=True)
        while not link.proposals.empty():
            await apply(link, link.proposals.get_nowait(), applied)
    await settle(link, applied)
    return applied


async def test_recall_by_ref_section_and_digest_id_is_exact(nomodel: DaemonProcess) -> None:
    async with AgentLink(nomodel.endpoint, agent="rec", budget=BUDGET, reserve=0.2) as link:
        await link.append(sec("u0", "Please fix the flaky test; the secret word is PELICAN-42.", "user"))
        applied = await fill(link, "t", 30, 8)
        assert applied, "nothing was compacted"
        for p, originals in applied:
            ref = p.archive[0]
            assert (await link.recall(ref))[ref] == originals  # every field, byte for byte
            digest = p.digest[0]
            assert digest.meta["archive"] == ref
            by_digest = await link.recall_sections(digest.id)
            assert [s for _, s in by_digest] == originals and {r for r, _ in by_digest} == {ref}
        one = applied[0][1][0]
        assert await link.recall_sections(one.id) == [(applied[0][0].archive[0], one)]
        with pytest.raises(LinkError) as err:
            await link.recall("a999999")
        assert err.value.code == "not_found"
        with pytest.raises(LinkError) as err:
            await link.recall_sections("never-existed")
        assert err.value.code == "not_found"


async def test_large_entries_come_back_in_pages(nomodel: DaemonProcess) -> None:
    async with AgentLink(nomodel.endpoint, agent="pager", budget=BUDGET, reserve=0.2) as link:
        applied = await fill(link, "m", 60, 1)  # many small sections: regions of many sections
        p, originals = max(applied, key=lambda a: len(a[1]))
        assert len(originals) >= 4, [len(o) for _, o in applied]
        ref = p.archive[0]
        first = await link.request({"t": "RECALL", "refs": [ref], "limit": 2})
        assert len(first["items"][0]["sections"]) == 2
        assert first["total"] == len(originals) and first["next_offset"] == 2
        tiny = await link.request({"t": "RECALL", "refs": [ref], "max_bytes": 1, "offset": 1})
        assert len(tiny["items"][0]["sections"]) == 1 and tiny["next_offset"] == 2  # at least one
        # the client follows the pages and reassembles the entry whole
        items = await link.recall_items({"refs": [ref], "limit": 3})
        got = [Section.from_wire(w, 1 << 20) for item in items for w in item["sections"]]
        assert got == originals
        last = await link.request({"t": "RECALL", "refs": [ref], "offset": len(originals) - 1})
        assert "next_offset" not in last


async def test_search_finds_own_text_with_snippets_and_pages(nomodel: DaemonProcess) -> None:
    async with AgentLink(nomodel.endpoint, agent="grep", budget=BUDGET, reserve=0.2) as link:
        applied = await fill(link, "g", 30, 8)
        archived = [s for _, originals in applied for s in originals]
        marker = archived[0].text.split(":")[0] + ":"  # "g item N:"
        hits, nxt = await link.search(marker.upper())  # ASCII case-insensitive
        assert hits and nxt is None
        assert {s.id for s in archived if marker in s.text} <= {h["section"] for h in hits}
        assert all(marker in h["snippet"] for h in hits)
        page, nxt = await link.search("quick brown fox", limit=2)
        assert len(page) == 2 and nxt == 2
        rest, _ = await link.search("quick brown fox", limit=2, offset=nxt)
        assert {h["section"] for h in rest}.isdisjoint({h["section"] for h in page})
        assert await link.search("no such text anywhere") == ([], None)
        for bad in ({"refs": ["a1"], "query": "x"}, {}, {"query": ""}, {"refs": []}):
            with pytest.raises(LinkError) as err:
                await link.request({"t": "RECALL", **bad})
            assert err.value.code == "invalid"


async def test_an_agent_recalls_across_its_own_sessions(nomodel: DaemonProcess) -> None:
    async with AgentLink(nomodel.endpoint, agent="multi", budget=BUDGET, reserve=0.2, session="s1") as link:
        applied = await fill(link, "x", 30, 8)
    ref = applied[0][0].archive[0]
    marker = applied[0][1][0].text.split(":")[0] + ":"  # "x item N:" of an archived section
    async with AgentLink(nomodel.endpoint, agent="multi", budget=BUDGET, reserve=0.2, session="s2") as link:
        assert (await link.recall(ref))[ref] == applied[0][1]
        hits, _ = await link.search(marker, session="s1")
        assert hits and all(h["session"] == "s1" for h in hits)
        assert await link.search(marker, session="s2") == ([], None)


def run_recall(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "watcher", "recall", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_recall_cli_reads_the_store_with_the_daemon_up_or_down(
    nomodel: DaemonProcess, tmp_path: Path
) -> None:
    state = str(tmp_path / "state")
    async with AgentLink(nomodel.endpoint, agent="human", budget=BUDGET, reserve=0.2) as link:
        applied = await fill(link, "h", 30, 8)
    p, originals = applied[0]
    ref = p.archive[0]
    out = await asyncio.to_thread(run_recall, "--state-dir", state, "--agent", "human", ref)
    assert out.returncode == 0, out.stderr
    for s in originals:
        assert s.text in out.stdout
    nomodel.stop()  # the archive is readable with the daemon down too
    out = await asyncio.to_thread(
        run_recall, "--state-dir", state, "--agent", "human", "--json", p.digest[0].id
    )
    assert out.returncode == 0, out.stderr
    records = json.loads(out.stdout)["records"]
    assert [Section.from_wire(r["section"], 1 << 20) for r in records] == originals
    listed = await asyncio.to_thread(run_recall, "--state-dir", state, "--agent", "human", "--list")
    assert ref in listed.stdout and "acked" in listed.stdout
    marker = originals[0].text.split(":")[0] + ":"  # "h item N:"
    found = await asyncio.to_thread(run_recall, "--state-dir", state, "--agent", "human", "--search", marker)
    assert originals[0].id in found.stdout
    other = await asyncio.to_thread(run_recall, "--state-dir", state, "--agent", "someone-else", ref)
    assert other.returncode == 1 and "no archive entry" in other.stdout
    missing = await asyncio.to_thread(run_recall, "--state-dir", str(tmp_path / "nope"), "--agent", "x", "a1")
    assert missing.returncode == 1 and "no store" in missing.stderr
