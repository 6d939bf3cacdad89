"""The policies behind one protocol (watcher.planning.policies), and the replay baselines: reactive
(compact only when the next call would not fit) and observation masking (old tool outputs become
placeholders), on a real trajectory; the masking proposal as the daemon builds it (serve.compactor)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipc.context import Context
from ipc.protocol import parse_hello
from ipc.sections import Section
from summarizer.digest import Summarizer, approx_tokens
from watcher.config.settings import AgentOverride, Config, resolve_agent
from watcher.eval.trajectories import Trajectory, load
from watcher.planning.baselines import MASK_KEEP_TURNS, MaskPlan, is_masked, plan_masking, plan_reactive
from watcher.planning.planner import Watermarks, fresh_start
from watcher.planning.policies import policy_for
from watcher.serve.compactor import build_masking
from watcher.serve.session import Session

FRESH = 4


@pytest.fixture(scope="module")
def sympy(trajectories: Path) -> Trajectory:
    return load(trajectories / "mini-swe-agent" / "sympy__sympy-13091.traj.json", count=approx_tokens)[0]


def prefix_over(traj: Trajectory, tokens: int) -> list[Section]:
    """The trajectory's sections up to the first turn that brings the total over ``tokens``."""
    out: list[Section] = []
    for turn in traj.turns:
        out += turn
        if sum(s.tokens for s in out) > tokens:
            return out
    raise AssertionError("trajectory too short")


def test_registry() -> None:
    marks = Watermarks(10_000, 0.15, 0.6)
    optimistic, recency = policy_for("optimistic"), policy_for("recency")
    assert optimistic.plans_ahead and recency.plans_ahead  # the planner's own: with look-ahead
    assert optimistic.needs_features and not recency.needs_features
    reactive, masking = policy_for("reactive"), policy_for("masking")
    assert not reactive.plans_ahead and not masking.plans_ahead
    assert reactive.trigger(marks, 500) == 10_000  # acts only once the context is over the budget
    assert masking.trigger(marks, 500) == marks.high - 1  # acts at the high watermark
    assert optimistic.trigger(marks, 0) == marks.high - 1
    with pytest.raises(ValueError, match="planner must be one of"):
        policy_for("lru")


def test_reactive_waits_for_the_budget_then_folds_the_oldest_history(sympy: Trajectory) -> None:
    marks = Watermarks(12_000, 0.15, 0.6)
    between = prefix_over(sympy, marks.high)
    assert marks.high < sum(s.tokens for s in between) <= marks.budget
    assert plan_reactive(between, marks, FRESH) is None, "nothing before the budget is reached"
    over = prefix_over(sympy, marks.budget)
    p = plan_reactive(over, marks, FRESH)
    assert p is not None
    ids = [s.id for s in over]
    start = ids.index(p.ids[0])
    assert list(p.ids) == ids[start : start + len(p.ids)], "one contiguous region"
    assert all(s.kind not in ("system",) and s.priority != "critical" for s in over if s.id in p.ids)
    assert start == next(i for i, s in enumerate(over) if s.priority != "critical" and s.kind != "system")
    assert set(p.ids).isdisjoint(s.id for s in over[-FRESH:]), "the freshest sections stay"
    total = sum(s.tokens for s in over)
    assert total - p.tokens + p.target_tokens <= marks.low, "one job reaches the low watermark"
    groups = {s.group for s in over if s.id in p.ids and s.group}
    assert all(s.id in p.ids for s in over if s.group in groups), "no tool call is split from its output"


def test_masking_replaces_only_old_tool_outputs(sympy: Trajectory) -> None:
    marks = Watermarks(12_000, 0.15, 0.6)
    under = prefix_over(sympy, marks.high - 2_000)
    assert sum(s.tokens for s in under) < marks.high
    assert plan_masking(under, marks, FRESH) is None
    over = prefix_over(sympy, marks.high)
    p = plan_masking(over, marks, FRESH)
    assert isinstance(p, MaskPlan)
    keep_from = fresh_start(over, MASK_KEEP_TURNS)
    masked = [s for s in over if s.id in p.masked]
    assert masked and all(s.kind == "tool_result" for s in masked)
    assert all(over.index(s) < keep_from for s in masked), "the last turns keep their outputs"
    old_outputs = [s for s in over[:keep_from] if s.kind == "tool_result" and s.tokens >= 24]
    assert {s.id for s in old_outputs} == set(p.masked), "every older output is masked at once"


async def test_masking_proposal_applies_and_archives(sympy: Trajectory) -> None:
    marks = Watermarks(12_000, 0.15, 0.6)
    over = prefix_over(sympy, marks.high)
    state = Session("a", "s", b"peer", marks)
    state.ctx = Context(over, 1)
    p = plan_masking(over, marks, FRESH)
    assert p is not None
    pending = await build_masking(state, p, Summarizer(None))
    assert pending is not None
    prop = pending.proposal
    assert prop.tokens_after < prop.tokens_before
    (ref,) = prop.archive
    assert [s.id for s in state.archive[ref]] == list(p.masked)
    assert all(a.text == next(s.text for s in over if s.id == a.id) for a in state.archive[ref])
    agent = Context(over, 1)
    assert agent.stale_reason(prop) == ""
    agent.apply_proposal(prop, 2)
    after = {s.id: s for s in agent}
    assert list(after) == [s.id for s in over], "same sections, same order"
    for s in over:
        if s.id in p.masked:
            assert is_masked(after[s.id]) and ref in after[s.id].text and after[s.id].tokens < s.tokens
        else:
            assert after[s.id] == s, "everything else is passed through untouched"
    assert agent.tokens == sum(s.tokens for s in over) - (prop.tokens_before - prop.tokens_after)
    # masked outputs are never masked twice
    again = plan_masking(list(agent), marks, FRESH)
    assert again is None or set(again.masked).isdisjoint(p.masked)


def test_an_agent_asks_for_a_baseline_and_the_config_wins() -> None:
    cfg = Config(agents={"pinned": AgentOverride(planner="optimistic")})
    assert resolve_agent(cfg, "a").planner == "optimistic"
    assert resolve_agent(cfg, "a", requested_planner="masking").planner == "masking"
    assert resolve_agent(cfg, "a", requested_planner="reactive").planner == "reactive"
    assert resolve_agent(cfg, "pinned", requested_planner="reactive").planner == "optimistic"
    with pytest.raises(ValueError, match="requested planner must be one of"):
        resolve_agent(cfg, "a", requested_planner="lru")
    hello = parse_hello({"t": "HELLO", "agent": "a", "budget": 1000, "planner": "masking"})
    assert hello.planner == "masking"
    assert parse_hello({"t": "HELLO", "agent": "a", "budget": 1000}).planner is None
