"""Leave-one-trajectory-out for `compactd bench planner --loo`: is the planner's regret ratio a
property of the method, or of the trajectories its parameters were fitted on?

For each trajectory, the relevance model (watcher.eval.relevance_fit) is fitted on all the other
trajectories and the trajectory left out is played with that fit (optimistic), next to recency
(which has no parameter). Reported per trajectory: both regrets and their ratio (None where
recency regretted nothing), the fitted parameters, and pooled over all held-out plays: regretted /
compacted sections of optimistic over the same for recency. The same figures with the shipped
defaults (fitted once on every trajectory: in-sample) are reported beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from watcher.eval.plansim import SimResult, simulate
from watcher.eval.relevance_fit import Rates, fit, measure
from watcher.eval.trajectories import Trajectory
from watcher.planning.planner import Watermarks
from watcher.planning.scoring import ScoreParams


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def _pooled(results: Sequence[SimResult]) -> float:
    compacted = sum(r.regret.compacted for r in results)
    return sum(r.regret.regretted for r in results) / compacted if compacted else 0.0


def leave_one_out(
    trajs: Sequence[Trajectory],
    marks: Watermarks,
    fresh: int,
    growth: int,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    rates = [measure([t]) for t in trajs]  # per trajectory: a fold sums all but one
    play: dict[str, list[SimResult]] = {"held_out": [], "in_sample": [], "recency": []}
    rows: dict[str, Any] = {}
    for k, t in enumerate(trajs):
        progress(f"leave-one-out: {t.name}")
        model = fit(_sum(r for m, r in enumerate(rates) if m != k))
        held = simulate(t, marks, fresh=fresh, growth=growth, params=ScoreParams(mentions=model))
        ins = simulate(t, marks, fresh=fresh, growth=growth)
        rec = simulate(t, marks, strategy="recency", fresh=fresh, growth=growth)
        play["held_out"].append(held)
        play["in_sample"].append(ins)
        play["recency"].append(rec)
        rows[t.name] = {
            "optimistic_held_out": round(held.regret.regret, 4),
            "optimistic_in_sample": round(ins.regret.regret, 4),
            "recency": round(rec.regret.regret, 4),
            "ratio_held_out": _ratio(held.regret.regret, rec.regret.regret),
            "ratio_in_sample": _ratio(ins.regret.regret, rec.regret.regret),
            "compacted_sections": [held.regret.compacted, rec.regret.compacted],
            "fitted": asdict(model),
        }
    rec_all = _pooled(play["recency"])
    return {
        "per_trajectory": rows,
        "pooled": {
            "optimistic_held_out": round(_pooled(play["held_out"]), 4),
            "optimistic_in_sample": round(_pooled(play["in_sample"]), 4),
            "recency": round(rec_all, 4),
            "ratio_held_out": _ratio(_pooled(play["held_out"]), rec_all),
            "ratio_in_sample": _ratio(_pooled(play["in_sample"]), rec_all),
        },
        "compactions": sum(r.compactions for r in play["held_out"]),
    }


def _sum(parts: Any) -> Rates:
    out = Rates()
    for r in parts:
        for mine, theirs in ((out.agent, r.agent), (out.cold, r.cold)):
            for key, (n, hit) in theirs.items():
                c = mine.setdefault(key, [0, 0])
                c[0] += n
                c[1] += hit
        out.goal[0] += r.goal[0]
        out.goal[1] += r.goal[1]
    return out
