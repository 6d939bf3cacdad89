"""Fitting the mentions model to trajectories (watcher.eval.relevance_fit) and leave-one-out."""

from __future__ import annotations

from pathlib import Path

from ipc.sections import Section
from summarizer.digest import approx_tokens
from watcher.eval.bench.planner import PlannerBenchSettings, run_planner_bench
from watcher.eval.relevance_fit import OLD_AGE, Rates, fit, fit_on, measure
from watcher.eval.trajectories import Trajectory, load_many
from watcher.planning.relevance import MentionModel


def _turn(k: int, said: str, output: str) -> list[Section]:
    g = f"g{k}"
    return [
        Section(f"a{k}", "assistant", said, tokens=10, group=g),
        Section(f"o{k}", "tool_result", output, tokens=10, group=g),
    ]


def test_rates_count_each_identifier_once_a_turn_by_what_the_context_says() -> None:
    task = Section("task", "user", "fix the date bug in dates.py", tokens=10, priority="critical")
    turns = [
        [task],
        _turn(1, "look at parse_date", "def parse_date(): read_config()"),
        _turn(2, "run it", "error in read_config and load_cache"),
        _turn(3, "fix parse_date and read_config", "ok"),
    ]
    r = measure([Trajectory("t", "mini-swe-agent", turns)])
    # age 0: parse_date at turn 1 (named again at 3), parse_date and read_config at 3 (never again)
    assert r.agent[0] == [3, 1]
    assert r.agent[1] == [1, 1]  # parse_date at turn 2
    # dates.py: only the goal, at every turn, never named by the agent
    assert r.goal == [4, 0]
    # read_config: tool output only at turns 1 (1 holder) and 2 (2 holders), named at turn 3
    # load_cache: turn 2 (1 holder) and 3, never named
    assert r.cold[1] == [3, 1]  # read_config@1 (named later), load_cache@2, load_cache@3
    assert r.cold[2] == [1, 1]  # read_config@2


def test_fit_recovers_the_rates() -> None:
    r = Rates()
    for age in range(OLD_AGE):
        r.agent[age] = [10_000, round(10_000 * (0.3 + 0.5 * 0.5 ** (age / 4.0)))]
    r.agent[OLD_AGE] = [50_000, 15_000]  # the old ones: the floor
    r.goal = [100, 7]
    r.cold = {1: [1000, 30], 2: [100, 9]}
    m = fit(r, MentionModel(cold_cap=3))
    assert (m.floor, m.amplitude, m.half_life_turns) == (0.3, 0.5, 4.0)
    assert m.p_goal == 0.07 and m.p_cold == 0.03 and m.cold_cap == 3


def test_the_shipped_defaults_are_the_fit_on_all_shared_trajectories(trajectories: Path) -> None:
    paths = sorted(p for p in trajectories.rglob("*") if p.suffix in (".json", ".jsonl", ".traj"))
    trajs = load_many(paths, count=approx_tokens)
    assert len(trajs) == 12
    m, d = fit_on(trajs), MentionModel()
    assert abs(m.floor - d.floor) < 0.05 and abs(m.floor + m.amplitude - d.floor - d.amplitude) < 0.05
    assert abs(m.half_life_turns - d.half_life_turns) <= 2
    assert abs(m.p_goal - d.p_goal) < 0.02 and abs(m.p_cold - d.p_cold) < 0.01


def test_leave_one_out_plays_each_trajectory_with_a_fit_on_the_others(trajectories: Path) -> None:
    paths = [
        trajectories / "mini-swe-agent" / f"{n}.traj.json"
        for n in ("sympy__sympy-13091", "django__django-15629")
    ]
    s = PlannerBenchSettings(
        paths, model_tokenizer=False, variants=["optimistic:mentions"], lookahead_tokens=10**6, loo=True
    )
    out = run_planner_bench(s)
    loo = out["leave_one_out"]
    rows = loo["per_trajectory"]
    assert set(rows) == {"sympy__sympy-13091", "django__django-15629"}
    # each trajectory's model was fitted on the other one only: they differ
    assert rows["sympy__sympy-13091"]["fitted"] != rows["django__django-15629"]["fitted"]
    assert loo["compactions"] > 0 and loo["pooled"]["recency"] > 0
    assert loo["pooled"]["ratio_held_out"] is not None
    assert "held-out regret / recency regret (leave-one-trajectory-out)" in out["goals"]
    assert out["settings"]["lookahead_tokens"] == 10**6
