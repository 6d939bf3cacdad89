"""The age order decides unless the value tells regions apart by more than its spread
(watcher.planning.planner._choose, ScoreParams.evidence_sigmas), on contexts of a real trajectory."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ipc.sections import Section
from summarizer.digest import approx_tokens
from watcher.eval.trajectories import Trajectory, load
from watcher.planning.planner import Plan, Watermarks, plan
from watcher.planning.scoring import ScoreParams, Scorer, Valuation

MARKS = Watermarks(16000, 0.15, 0.7)


@pytest.fixture(scope="module")
def sympy(trajectories: Path) -> Trajectory:
    return load(trajectories / "mini-swe-agent" / "sympy__sympy-13091.traj.json", count=approx_tokens)[0]


def contexts(traj: Trajectory) -> list[list[Section]]:
    """The context before each LLM call of the trajectory's first 60 turns, nothing folded."""
    out: list[list[Section]] = []
    ctx: list[Section] = []
    for turn in traj.turns[:60]:
        ctx.extend(turn)
        out.append(list(ctx))
    return out


def test_spread_is_the_variance_of_a_count_of_regretted_sections(sympy: Trajectory) -> None:
    secs = contexts(sympy)[40]
    v = Scorer().valuation(secs)
    for i, j in [(2, 9), (10, 30), (0, len(secs))]:
        want = sum(min(1.0, v.section(k)) * (1 - min(1.0, v.section(k))) for k in range(i, j))
        assert v.spread(i, j) == pytest.approx(want)
    assert v.spread(5, 5) == 0.0
    assert all(v.spread(k, k + 1) <= 0.25 for k in range(len(secs)))


def _plans(secs: list[Section], growth: int) -> dict[str, Plan | None]:
    out: dict[str, Plan | None] = {}
    for name, sigmas in (("cheapest", 0.0), ("evidence", 1.0), ("never", 1e9)):
        out[name] = plan(secs, MARKS, 4, scorer=Scorer(ScoreParams(evidence_sigmas=sigmas)), growth=growth)
    out["recency"] = plan(secs, MARKS, 4, strategy="recency", growth=growth)
    return out


def _measure(secs: list[Section], v: Valuation, q: Plan) -> tuple[float, float]:
    """(cost, spread) of a plan's region: value lost plus the cache term, and the value's variance."""
    i = next(k for k, s in enumerate(secs) if s.id == q.ids[0])
    j = i + len(q.ids)
    return v.region(i, j) + q.invalidated_prefix_tokens / MARKS.budget, v.spread(i, j)


def test_the_value_overrides_the_age_order_only_by_more_than_its_spread(sympy: Trajectory) -> None:
    growth = 10**6  # as early as the daemon plans with look-ahead: several regions qualify
    overridden = kept = 0
    for secs in contexts(sympy):
        p = _plans(secs, growth)
        if p["recency"] is None:
            assert p["cheapest"] is p["evidence"] is p["never"] is None
            continue
        assert p["never"] is not None and p["never"].ids == p["recency"].ids  # no evidence is enough
        cheap, chosen = p["cheapest"], p["evidence"]
        assert cheap is not None and chosen is not None
        v = Scorer().valuation(secs)
        best, got = _measure(secs, v, cheap), _measure(secs, v, chosen)  # (cost, spread)
        start = {s.id: i for i, s in enumerate(secs)}
        # the chosen region is never younger than the cheapest, never older than recency's
        assert start[p["recency"].ids[0]] <= start[chosen.ids[0]] <= start[cheap.ids[0]]
        assert got[0] <= best[0] + math.sqrt(got[1] + best[1]) + 1e-9
        if chosen.ids != p["recency"].ids:  # recency's region was too costly by the evidence
            old = _measure(secs, v, p["recency"])
            assert old[0] > best[0] + math.sqrt(old[1] + best[1])
            overridden += 1
        if chosen.ids != cheap.ids:
            kept += 1
    assert overridden and kept, "both cases happen on a real trajectory"


def test_evidence_sigmas_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="evidence_sigmas"):
        ScoreParams(evidence_sigmas=-1.0)
