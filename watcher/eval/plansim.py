"""Play a trajectory through the planner alone (no daemon, no model): fast what-if runs.

Each turn is appended; before the agent's LLM call, plans are applied at once (a digest of the
planned target size replaces the region) for as long as usage is at the high watermark and the
planner finds something. This measures the planner's choices (regret, cache cost, watermark
behaviour) in milliseconds per trajectory; ``compactd replay`` measures the real thing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ipc.sections import Section
from watcher.eval.regret import Regret, regret
from watcher.eval.trajectories import Trajectory
from watcher.planning.planner import Watermarks, plan
from watcher.planning.scoring import ScoreParams, Scorer


@dataclass
class SimResult:
    name: str
    strategy: str
    usage: list[int] = field(default_factory=list)
    compactions: int = 0
    invalidated: int = 0
    removed: dict[str, int] = field(default_factory=dict)
    digest_of_digest: int = 0
    anchors_replaced: int = 0
    regret: Regret = field(default_factory=lambda: Regret(0, 0, 0))

    def metrics(self, marks: Watermarks) -> dict[str, Any]:
        turns = len(self.usage)
        return {
            "turns": turns,
            "turns_over_high_watermark": round(sum(u > marks.high for u in self.usage) / turns, 4)
            if turns
            else 0.0,
            "overflow_turns": sum(u > marks.budget for u in self.usage),
            "compactions": self.compactions,
            "cache_invalidated_tokens": self.invalidated,
            "digest_of_digest": self.digest_of_digest,
            **self.regret.metrics(),
        }


def simulate(
    traj: Trajectory,
    marks: Watermarks,
    *,
    strategy: str = "optimistic",
    fresh: int = 4,
    params: ScoreParams | None = None,
    cache_weight: float = 1.0,
    growth: int = 0,
    max_rounds: int = 8,
    timings: list[float] | None = None,
) -> SimResult:
    """Play ``traj``; ``timings``, if given, receives the wall time (ms) of every call that planned.

    ``growth`` is a fixed look-ahead (tokens expected before a digest is ready; the planner caps
    it): 0 plans at the high watermark; a large value plans as early as the live daemon does when
    its look-ahead is at the cap (a model job of seconds at a turn every 2 s)."""
    res = SimResult(traj.name, strategy)
    ctx: list[Section] = []
    scorer = Scorer(params)
    digests = 0
    for k, turn in enumerate(traj.turns):
        ctx.extend(turn)
        for _ in range(max_rounds):
            t0 = time.perf_counter()
            p = plan(
                ctx, marks, fresh, strategy=strategy, scorer=scorer, cache_weight=cache_weight, growth=growth
            )
            if p is None:
                break
            if timings is not None:
                timings.append((time.perf_counter() - t0) * 1000)
            start = next(i for i, s in enumerate(ctx) if s.id == p.ids[0])
            region = ctx[start : start + len(p.ids)]
            res.digest_of_digest += sum(s.kind == "digest" for s in region)
            res.anchors_replaced += sum(s.kind == "system" or s.priority == "critical" for s in region)
            digests += 1
            d = Section(f"sim-d{digests}", "digest", "", tokens=p.target_tokens)
            ctx[start : start + len(p.ids)] = [d]
            res.compactions += 1
            res.invalidated += p.invalidated_prefix_tokens
            for sid in p.ids:
                res.removed.setdefault(sid, k)
        res.usage.append(sum(s.tokens for s in ctx))
    res.regret = regret(traj.turns, res.removed)
    return res
