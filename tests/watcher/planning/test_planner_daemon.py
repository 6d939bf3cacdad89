"""The planner inside a real daemon: per-agent strategy from HELLO, anchors kept, digests verbatim.

A `compactd run` subprocess without the model (deterministic digests keep this fast), a real
ipc socket, the real sympy trajectory, two agents at once: one optimistic, one recency.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ipc.client import AgentLink
from ipc.protocol import Proposal
from ipc.sections import Section
from summarizer.digest import approx_tokens
from watcher.eval.harness import DaemonProcess
from watcher.eval.trajectories import Trajectory, load

BUDGET = 12000


async def _play(
    endpoint: str, traj: Trajectory, planner: str
) -> tuple[dict[str, object], list[tuple[Proposal, list[Section]]]]:
    applied: list[tuple[Proposal, list[Section]]] = []
    async with AgentLink(
        endpoint, agent=f"planner-{planner}", budget=BUDGET, reserve=0.15, planner=planner
    ) as link:
        for turn in traj.turns[:60]:
            await link.append(*turn, wait=True)
            while True:
                try:
                    p = await asyncio.wait_for(
                        link.proposals.get(), 0.05 if link.context.tokens <= BUDGET else 3
                    )
                except TimeoutError:
                    break
                before = [s for i in p.replaces if (s := link.context.get(i)) is not None]
                if await link.apply(p):
                    applied.append((p, before))
        return dict(link.welcome), applied


@pytest.mark.slow
async def test_each_agent_gets_its_planner_and_anchors_stay(tmp_path: Path, trajectories: Path) -> None:
    traj = load(trajectories / "mini-swe-agent" / "sympy__sympy-13091.traj.json", count=approx_tokens)[0]
    daemon = DaemonProcess(tmp_path, None, model=False)
    try:
        await daemon.wait_ready()
        (w_opt, opt), (w_rec, rec) = await asyncio.gather(
            _play(daemon.endpoint, traj, "optimistic"), _play(daemon.endpoint, traj, "recency")
        )
    finally:
        daemon.stop()
    assert w_opt["planner"] == "optimistic" and w_rec["planner"] == "recency"
    assert opt and rec, "both agents got proposals"
    for p, before in opt + rec:
        assert all(s.kind not in ("system", "digest") for s in before), "no anchor, no digest of a digest"
        assert all(s.priority != "critical" for s in before)
        assert p.tokens_after < p.tokens_before
        assert p.invalidated_prefix_tokens >= p.tokens_before
    # recency folds the oldest foldable history first: right after the task
    assert rec[0][0].replaces[0] == "s00002"
    log = (tmp_path / "daemon.log").read_text()
    assert "internal_error" not in log
