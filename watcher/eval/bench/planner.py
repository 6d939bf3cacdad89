"""`compactd bench planner`: the planner alone on the recorded trajectories, in seconds.

Every trajectory is played through :func:`watcher.eval.plansim.simulate` (no daemon, no model: a
digest of the planned target size replaces each region at once) for each strategy and relevance
method, at one or more budgets. Reported per variant: pooled regret (regretted / compacted
sections over all trajectories), regret_raw, compactions, cache-invalidated tokens,
digest_of_digest, and the ratio to the recency baseline at the same budget. This is how the
relevance method was chosen (docs/BENCHMARKS.md); ``compactd replay`` measures the real daemon.

Also reported: the wall time of each plan (p50, p99, max, in ms) for the default variant, and
the per-delta cost of the O(1) trigger check, so a change that makes planning or ingest costly
shows up here.

A variant is ``strategy:method[:sigmas]``; ``sigmas`` sets ScoreParams.evidence_sigmas (how many
standard deviations the value must beat the age order by: 0 = the cheapest region always).
``lookahead_tokens`` plans that much before the high watermark (capped as the daemon caps it; a
large value plans as early as the live daemon with a model: the replay's setting); ``loo`` adds the
leave-one-trajectory-out table (watcher.eval.bench.planner_loo).

Goals: issue 4, the default variant's regret at most 0.7 x recency's at the first budget; issue
15 (with ``loo``), the held-out pooled ratio at most 0.8. Both with compactions made (a run where
nothing was compacted measured nothing: missed). The simulation is deterministic, so one run is the
figure: there is no run-to-run spread to report.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watcher.eval.bench.goals import BenchError, Goal, exercised, judge
from watcher.eval.bench.planner_loo import leave_one_out
from watcher.eval.plansim import SimResult, simulate
from watcher.eval.replay import percentile, token_counter
from watcher.eval.trajectories import Trajectory, TrajectoryError, load_many
from watcher.planning.lookahead import Lookahead
from watcher.planning.planner import Watermarks, should_plan
from watcher.planning.relevance import RELEVANCE_METHODS
from watcher.planning.scoring import ScoreParams

DEFAULT_VARIANT = "optimistic:mentions"


@dataclass(frozen=True)
class PlannerBenchSettings:
    paths: list[Path]
    budgets: Sequence[int] = (32000,)
    reserve: float = 0.15
    low_watermark: float = 0.7
    fresh_turns: int = 4
    model_tokenizer: bool = True
    variants: Sequence[str] = field(
        default_factory=lambda: [f"optimistic:{m}" for m in RELEVANCE_METHODS] + ["optimistic:mentions:0"]
    )
    lookahead_tokens: int = 0
    loo: bool = False


def _pooled(results: Sequence[SimResult], marks: Watermarks) -> dict[str, Any]:
    compacted = sum(r.regret.compacted for r in results)
    regretted = sum(r.regret.regretted for r in results)
    raw = sum(r.regret.regretted_raw for r in results)
    turns = sum(len(r.usage) for r in results)
    over = sum(u > marks.high for r in results for u in r.usage)
    return {
        "regret": round(regretted / compacted, 4) if compacted else 0.0,
        "regret_raw": round(raw / compacted, 4) if compacted else 0.0,
        "compacted_sections": compacted,
        "regretted_sections": regretted,
        "compactions": sum(r.compactions for r in results),
        "cache_invalidated_tokens": sum(r.invalidated for r in results),
        "digest_of_digest": sum(r.digest_of_digest for r in results),
        "anchors_replaced": sum(r.anchors_replaced for r in results),
        "turns_over_high_watermark_instant_digests": round(over / turns, 4) if turns else 0.0,
        "per_trajectory": {r.name: round(r.regret.regret, 4) for r in results},
    }


def _timed_plans(trajs: Sequence[Trajectory], marks: Watermarks, fresh: int, growth: int) -> list[float]:
    """Wall time of every plan the optimistic variant makes, in ms."""
    times: list[float] = []
    for t in trajs:
        simulate(t, marks, strategy="optimistic", fresh=fresh, growth=growth, timings=times)
    return times


def _variant(variant: str) -> tuple[str, ScoreParams]:
    strategy, _, rest = variant.partition(":")
    method, _, sigmas = rest.partition(":")
    params = ScoreParams(relevance=method or "mentions")
    if sigmas:
        params = ScoreParams(relevance=params.relevance, evidence_sigmas=float(sigmas))
    return strategy, params


def _trigger_cost_ns(samples: int = 200_000) -> float:
    """Per-delta cost of what ingest adds: the look-ahead update and the O(1) trigger check."""
    la = Lookahead()
    marks = Watermarks(32000, 0.15, 0.6)
    t0 = time.perf_counter()
    for k in range(samples):
        la.observe(1000 + k, k * 0.01)
        should_plan(1000 + k, marks, la.tokens_ahead())
    return (time.perf_counter() - t0) / samples * 1e9


def run_planner_bench(
    s: PlannerBenchSettings, progress: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    count = token_counter(s.model_tokenizer)
    try:
        trajs = load_many(s.paths, count=count)
    except TrajectoryError as exc:
        raise BenchError(str(exc)) from exc
    out: dict[str, Any] = {"trajectories": [t.name for t in trajs], "budgets": {}}
    grow = s.lookahead_tokens
    for budget in s.budgets:
        marks = Watermarks(budget, s.reserve, s.low_watermark)
        progress(f"budget {budget}: recency")
        rec = [simulate(t, marks, strategy="recency", fresh=s.fresh_turns, growth=grow) for t in trajs]
        base = _pooled(rec, marks)
        rows: dict[str, Any] = {"recency": base}
        for variant in s.variants:
            strategy, params = _variant(variant)
            progress(f"budget {budget}: {variant}")
            res = [
                simulate(t, marks, strategy=strategy, fresh=s.fresh_turns, params=params, growth=grow)
                for t in trajs
            ]
            row = _pooled(res, marks)
            row["ratio_to_recency"] = round(row["regret"] / base["regret"], 3) if base["regret"] else None
            rows[variant] = row
        out["budgets"][str(budget)] = rows
    marks = Watermarks(s.budgets[0], s.reserve, s.low_watermark)
    times = _timed_plans(trajs, marks, s.fresh_turns, grow)
    out["plan_ms"] = {
        "plans": len(times),
        "p50": round(percentile(times, 50), 2),
        "p99": round(percentile(times, 99), 2),
        "max": round(max(times, default=0.0), 2),
    }
    out["trigger_check_ns_per_delta"] = round(_trigger_cost_ns(), 1)
    out["settings"] = {
        "reserve": s.reserve,
        "low_watermark": s.low_watermark,
        "fresh_turns": s.fresh_turns,
        "lookahead_tokens": grow,
        "tokenizer": "model" if s.model_tokenizer else "approx",
    }
    first = out["budgets"][str(s.budgets[0])]
    default = first.get(DEFAULT_VARIANT) or first[s.variants[0]]
    ratio = exercised(default["ratio_to_recency"], default["compactions"] > 0)
    goals = [Goal(f"{DEFAULT_VARIANT} regret / recency regret", ratio, "<=", 0.7)]
    if s.loo:
        loo = out["leave_one_out"] = leave_one_out(trajs, marks, s.fresh_turns, grow, progress)
        held = exercised(loo["pooled"]["ratio_held_out"], loo["compactions"] > 0)
        goals.append(Goal("held-out regret / recency regret (leave-one-trajectory-out)", held, "<=", 0.8))
    return judge(out, goals)
