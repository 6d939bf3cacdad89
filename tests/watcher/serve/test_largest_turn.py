"""A streak of large turns is planned for: the look-ahead's largest turn lately (Lookahead.tail)
moves the trigger and the scheduler's order, so that another such turn fits the budget."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from ipc.client import AgentLink
from ipc.context import Context
from ipc.sections import Section
from watcher.eval.harness import DaemonProcess
from watcher.planning.lookahead import FAR_S, Lookahead
from watcher.planning.planner import Watermarks
from watcher.serve.jobs import Jobs
from watcher.serve.session import Session

pytestmark = pytest.mark.serial  # races the machine's own speed (tests/conftest.py)


def test_the_schedulers_order_counts_the_largest_turn_lately() -> None:
    """Two agents under their high watermark, the same small turns since they attached; one sent a
    12 000-token tool output in its history. The scheduler's order puts it first (a turn that large
    again would take it over its budget sooner); by the budget alone (Jobs.due: the express checks,
    the degradation) the two are the same."""
    marks = Watermarks(40_000, 0.15, 0.6)  # high 34 000 (a reserve of 6 000), low 24 000

    def session(name: str, history: list[int]) -> Session:
        la = Lookahead()
        total = 0
        for k, grew in enumerate(history):  # appended back to back at attach: the start
            total += grew
            la.observe(total, 0.01 * k)
        for k in range(1, 7):  # then a turn of 100 tokens every 2 s
            la.observe(total + 100 * k, 2.0 * k)
        assert la.steps == 6
        sec = Section(f"{name}-all", "tool_result", "x", tokens=28_000)
        return Session(name, "s", b"peer", marks, ctx=Context([sec]), lookahead=la)

    streak = session("streak", [1_000, 12_000, 500])
    plain = session("plain", [1_000, 2_000, 500])
    assert streak.lookahead.largest(16_000) > 6_000 > plain.lookahead.largest(16_000)
    assert Jobs.deadline(streak) < Jobs.deadline(plain)
    assert Jobs.due(streak) == Jobs.due(plain)


def test_an_agent_seen_only_attaching_near_its_budget_is_due_at_once() -> None:
    """Its history alone seen (no turn yet, so when its first comes is not known): due when its
    history last grew if its largest turn lately would take it over its budget, else far ahead (the
    scheduler's aging serves it). By the budget alone (Jobs.due) both are far ahead."""
    marks = Watermarks(24_000, 0.15, 0.7)  # high 20 400, low 16 800: a reserve of 3 600

    def session(name: str, history: list[int]) -> Session:
        la, total = Lookahead(), 0
        for k, grew in enumerate(history):  # appended back to back at attach: the start
            total += grew
            la.observe(total, 100.0 + 0.01 * k)
        assert la.steps == 0
        sec = Section(f"{name}-all", "tool_result", "x", tokens=total)
        return Session(name, "s", b"peer", marks, ctx=Context([sec]), lookahead=la)

    streak = session("streak", [8_000, 3_100, 6_100, 2_100])  # 19 300, one turn after 6 100
    calm = session("calm", [8_000, *[1_100] * 10])  # 19 000
    at = 100.0 + 0.01 * 3
    assert Jobs.deadline(streak) == at  # 19 300 + 5 795 > 24 000
    assert Jobs.deadline(calm) > time.monotonic() + FAR_S / 2  # 19 000 + 3 600 fits
    assert Jobs.due(streak) > time.monotonic() + FAR_S / 2
    la = streak.lookahead
    assert la.deadline(19_300, 24_000, 200.0, margin=False, reserve=5_795) == 200.0 + FAR_S


def _sec(agent: str, n: int, tokens: int) -> Section:
    text = "".join(f"{agent} line {n}.{j}: value={n * 7 + j}\n" for j in range(tokens // 12))
    return Section(f"{agent}-{n}", "tool_result", text, tokens=tokens)


@pytest.mark.slow
@pytest.mark.parametrize("sent", ["appends", "snapshot"])
async def test_an_agent_whose_history_holds_a_large_output_is_compacted_for_another(
    tmp_path: Path, sent: str
) -> None:
    """A real daemon (no model), budget 24 000 (high watermark 20 400, low 16 800: a reserve of
    3 600). Two agents attach with histories of 19 000 tokens, one append per section back to back,
    or all in one SNAPSHOT (an agent resuming its session through the proxy or an adapter); one
    history ends with a 6 000-token tool output and a turn of 2 000. Its context is compacted at
    once, far enough under its high watermark that another 6 000-token turn fits its budget; the
    other, whose turns fit its reserve, is left as it is (under its trigger)."""
    proc = DaemonProcess(tmp_path, None, model=False)
    await proc.wait_ready(30)
    try:
        streak = AgentLink(proc.endpoint, agent="streak", budget=24_000, timeout_s=20)
        plain = AgentLink(proc.endpoint, agent="plain", budget=24_000, timeout_s=20)
        histories = {
            streak: [4_000, *[500] * 14, 6_000, 2_000],  # 19 000 in all
            plain: [4_000, *[1_000] * 15],  # 19 000 in all
        }
        for link, turns in histories.items():
            welcome = await link.connect()
            assert (welcome["high_watermark"], welcome["low_watermark"]) == (20_400, 16_800)
            sections = [_sec(link.agent, n, tokens) for n, tokens in enumerate(turns)]
            if sent == "snapshot":
                await link.snapshot(sections)
            for sec in sections if sent == "appends" else ():
                await link.append(sec, wait=True)
            assert link.context.tokens == 19_000
        proposal = await asyncio.wait_for(streak.proposals.get(), 30)
        assert await streak.apply(proposal)
        assert streak.context.tokens + 6_000 <= 24_000, streak.context.tokens
        await asyncio.sleep(1.0)
        assert plain.proposals.empty()  # 19 000 is under its trigger: nothing to do yet
        looks = [(await link.status())["agents"][0]["lookahead"] for link in (streak, plain)]
        assert looks[0]["largest_turn_tokens"] == round(6_000 * 0.95)  # one turn since
        assert looks[1]["largest_turn_tokens"] == round(4_000 * 0.95**15)  # its first section, faded
        for link in histories:
            await link.close()
    finally:
        proc.stop()
