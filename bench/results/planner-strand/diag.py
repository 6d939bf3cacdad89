"""Offline: how often each policy's plan cannot meet its need, and how many foldable runs the
context holds when it plans (the planner alone, watcher.eval.plansim; budget 32000, reserve 0.15,
low 0.7). Usage, from the repository root:

    .venv/bin/python bench/results/planner-strand/diag.py [LOOKAHEAD_TOKENS]   # 0 or 1000000
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from watcher.eval import plansim
from watcher.eval.replay import token_counter
from watcher.eval.trajectories import load_many
from watcher.planning import planner
from watcher.planning.scoring import ScoreParams

S = Path("../shared/trajectories")
PATHS = [
    *sorted((S / "mini-swe-agent").glob("*.json")),
    S / "openhands/output.jsonl",
    S / "openhands-nunu0404/output.jsonl",
    S / "swe-agent/pydicom__pydicom-1458.traj",
]
stats: dict[str, list[int]] = {}
plan = planner.plan


def counted(sections: Any, marks: planner.Watermarks, fresh: int, **kw: Any) -> planner.Plan | None:
    p = plan(sections, marks, fresh, **kw)
    if p is not None:
        st = stats.setdefault(kw["strategy"], [0, 0, 0])
        anchors = planner.anchor_mask(sections, fresh, planner.oversize_limit(marks))
        st[0] += 1
        st[1] += p.saved < p.need
        st[2] += len(planner._runs(anchors))
    return p


plansim.plan = counted  # type: ignore[assignment]
growth = int(sys.argv[1]) if len(sys.argv) > 1 else 0
trajs = load_many(PATHS, count=token_counter(True))
for strategy in ("recency", "optimistic"):
    for t in trajs:
        plansim.simulate(
            t, planner.Watermarks(32000, 0.15, 0.7), strategy=strategy, growth=growth, params=ScoreParams()
        )
for strategy, (plans, short, runs) in stats.items():
    print(f"{strategy}: {plans} plans, {short} short of their need, {runs / plans:.2f} runs per plan")
