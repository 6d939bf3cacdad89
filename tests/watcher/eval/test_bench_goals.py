"""Every `compactd bench` judges its goals the same way (watcher.eval.bench.goals): a goal not
exercised is missed, a missed goal is named on stderr and makes the command exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.cli import compactd
from tests.fixtures.trajectories import require
from watcher.eval.bench.goals import EXIT_MISSED, EXIT_OK, Goal, emit, exercised, judge, spread

MINI = require() / "mini-swe-agent"


def test_a_goal_not_exercised_is_missed() -> None:
    r = judge({}, [Goal("ratio", 0.4, "<=", 0.7), Goal("originals", exercised(0, False), "==", 0)])
    assert r["goals"]["ratio"] == {"target": "<= 0.7", "measured": 0.4, "met": True}
    assert r["goals"]["originals"] == {
        "target": "== 0",
        "measured": None,
        "met": False,
        "why": "not exercised",
    }
    assert r["missed"] == ["originals"] and r["goals_met"] is False
    assert Goal("nan", float("nan"), ">=", 0).met is False


def test_no_goal_at_all_is_missed() -> None:
    r = judge({}, [])
    assert r["goals_met"] is False and r["missed"]


def test_emit_writes_json_names_the_missed_goal_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    missed = judge({"x": 1}, [Goal("p99_ms", 72.5, "<=", 50)])
    assert emit(missed, out) == EXIT_MISSED
    assert json.loads(out.read_text())["missed"] == ["p99_ms"]
    assert "goal missed: p99_ms (target <= 50, measured 72.5)" in capsys.readouterr().err
    assert emit(judge({}, [Goal("p99_ms", 12.0, "<=", 50)]), None) == EXIT_OK
    assert emit({"no": "goals"}, None) == EXIT_MISSED


def test_spread_is_median_and_range() -> None:
    assert spread([0.6, 0.2, 0.4]) == {"median": 0.4, "min": 0.2, "max": 0.6, "rounds": [0.6, 0.2, 0.4]}
    assert spread([])["median"] is None


def test_planner_bench_that_compacts_nothing_fails(tmp_path: Path) -> None:
    """A budget so large that nothing is ever compacted: the regret goal was not exercised, so the
    real command exits 1 and says which goal it missed."""
    out = tmp_path / "planner.json"
    traj = sorted(MINI.glob("*.traj.json"))[0]
    run = compactd("bench", "planner", str(traj), "--budget", "5000000", "--json", str(out))
    assert run.returncode == 1, run.stderr[-2000:]
    r = json.loads(out.read_text())
    (name,) = r["missed"]
    assert r["goals"][name]["why"] == "not exercised" and not r["goals_met"]
    assert f"goal missed: {name}" in run.stderr


def test_store_sync_reports_ratios_as_median_and_range(tmp_path: Path) -> None:
    out = tmp_path / "sync.json"
    run = compactd(
        "bench",
        "store-sync",
        "--proposals",
        "30",
        "--rounds",
        "3",
        "--dir",
        str(tmp_path),
        "--json",
        str(out),
    )
    r = json.loads(out.read_text())
    assert run.returncode == (0 if r["goals_met"] else 1), run.stderr[-2000:]
    ratio = r["normal_vs_plain_loop_p50"]
    assert len(ratio["rounds"]) == 3 and ratio["min"] <= ratio["median"] <= ratio["max"]
    assert set(r["goals"]) == {
        "normal loop p50 / plain NORMAL loop p50",
        "full until_sent p50 / normal until_sent p50",
    }


def test_store_search_on_a_small_archive_leaves_its_speed_goals_not_exercised(
    tmp_path: Path,
) -> None:
    out = tmp_path / "search.json"
    run = compactd(
        "bench",
        "store-search",
        "--entries",
        "200",
        "--rounds",
        "1",
        "--dir",
        str(tmp_path),
        "--json",
        str(out),
    )
    assert run.returncode == 1, run.stderr[-2000:]
    r = json.loads(out.read_text())
    assert sorted(r["missed"]) == ["absent: speedup", "rare: speedup"]
    assert all(r["goals"][m]["why"] == "not exercised" for m in r["missed"])
    assert all(g["met"] for name, g in r["goals"].items() if "same hits" in name)
