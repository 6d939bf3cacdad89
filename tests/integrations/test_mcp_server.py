"""compactd mcp: recall/search/expand through the mcp SDK's stdio client, scoped to one agent."""

from __future__ import annotations

import asyncio
from typing import Any

from ipc import AgentLink, Transcript
from ipc.protocol import Proposal
from watcher.eval.bench.adapters import Chat, approx_tokens
from watcher.eval.harness import DaemonProcess


async def archive_some(
    endpoint: str, agent: str, token: str, turns: list[list[Chat]], want: int
) -> list[Proposal]:
    """Stream turns as ``agent`` (budget 6000) until ``want`` proposals were applied."""
    applied: list[Proposal] = []
    async with AgentLink(endpoint, agent, 6000, token=token) as link:
        tr = Transcript("openai", count=approx_tokens)
        for turn in turns:
            await link.append(*tr.add(*turn), wait=True)
            while link.context.tokens > link.high_watermark and len(applied) < want:
                p = await asyncio.wait_for(link.proposals.get(), 60)
                if await link.apply(p, onto=tr):
                    applied.append(p)
            if len(applied) >= want:
                break
        assert link.reattaches == 0
    return applied


def texts(p: Proposal, turns: list[list[Chat]]) -> dict[str, str]:
    """The originals a proposal replaced (section id -> the text it was sent with)."""
    tr = Transcript("openai")
    tr.add(*[m for turn in turns for m in turn])
    return {sid: s.text for sid, s in tr._sections.items() if sid in p.replaces}


async def test_recall_search_expand_and_isolation(
    token_daemon: DaemonProcess, turns: list[list[Chat]], mcp_client: Any, tokens: dict[str, str]
) -> None:
    ep = token_daemon.endpoint
    mine = await archive_some(ep, "alpha", tokens["alpha"], turns, 2)
    theirs = await archive_some(ep, "beta", tokens["beta"], turns[:1] + turns[20:], 2)
    assert mine and theirs
    alpha = mcp_client(ep, "alpha", tokens["alpha"])

    # the originals behind every digest are there, in full, over all pages
    for p in mine:
        whole = await alpha.recall_all(p.archive[0])
        for sid, text in texts(p, turns).items():
            assert f"--- {sid} " in whole and text in whole

    p = mine[0]
    sid = p.replaces[-1]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("expand", {"section_id": p.digest[0].id}),
        ("recall", {"ref": f"{p.archive[0]}#{sid}"}),
        ("search", {"query": "pytest"}),
    ]
    # another agent's references, section ids and digest ids: every one refused
    for q in theirs:
        calls += [("recall", {"ref": ref}) for ref in q.archive]
        calls += [("expand", {"section_id": d.id}) for d in q.digest]
    got = await alpha.calls(calls)
    (e1, expanded), (e2, one), (e3, found) = got[:3]
    assert not (e1 or e2 or e3)
    assert all(f"--- {s} " in expanded for s in p.replaces)
    assert f"--- {sid} " in one and one.count("--- ") == 1
    assert p.archive[0] in found
    foreign = got[3:]
    assert len(foreign) == sum(len(q.archive) + len(q.digest) for q in theirs)
    assert all(err and "not_found" in text for err, text in foreign), foreign

    # the wrong token for an agent: refused before anything is read
    ((err, text),) = await mcp_client(ep, "alpha", tokens["beta"]).calls([("search", {"query": "pytest"})])
    assert err and "unauthorized" in text
