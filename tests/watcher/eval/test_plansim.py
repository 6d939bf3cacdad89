"""The planner alone over whole real trajectories (watcher.eval.plansim): invariants and regret."""

from __future__ import annotations

from pathlib import Path

import pytest

from summarizer.tokenizer import load_counter
from watcher.eval.plansim import simulate
from watcher.eval.trajectories import Trajectory, load
from watcher.planning.planner import Watermarks

MARKS = Watermarks(32000, 0.15, 0.7)  # the default low watermark


@pytest.fixture(scope="module")
def long_runs(trajectories: Path, model_path: str) -> list[Trajectory]:
    """Counted with the model's tokenizer, as `compactd replay` counts them."""
    count = load_counter(model_path)
    names = ["sympy__sympy-13091", "sphinx-doc__sphinx-9258"]
    return [load(trajectories / "mini-swe-agent" / f"{n}.traj.json", count=count)[0] for n in names]


@pytest.mark.parametrize("strategy", ["optimistic", "recency"])
def test_whole_runs_keep_the_invariants(long_runs: list[Trajectory], strategy: str) -> None:
    for traj in long_runs:
        r = simulate(traj, MARKS, strategy=strategy)
        assert r.compactions > 2
        early = simulate(traj, MARKS, strategy=strategy, growth=10**6)
        assert early.compactions >= r.compactions, "planned earlier (look-ahead): at least as many"
        first = min(early.removed.values())
        assert first <= min(r.removed.values()), "and the first one no later"
        assert r.digest_of_digest == 0 and r.anchors_replaced == 0
        assert max(r.usage) <= MARKS.high, "with instant digests, no call sees usage over the high mark"
        assert all(r.removed[s] >= 0 for s in r.removed)
        task = traj.turns[0]
        assert not any(s.id in r.removed for s in task), "the system prompt and the task stay"


def test_optimistic_regrets_less_than_recency_on_long_runs(long_runs: list[Trajectory]) -> None:
    """At the issue's budget and the default watermarks; docs/BENCHMARKS.md shows the spread over
    budgets, watermarks and look-ahead (at low watermark 0.6 sphinx's ratio is 0.91)."""
    for traj in long_runs:
        opt = simulate(traj, MARKS, strategy="optimistic").regret
        rec = simulate(traj, MARKS, strategy="recency").regret
        assert opt.compacted and rec.compacted
        assert opt.regret < 0.7 * rec.regret, traj.name
