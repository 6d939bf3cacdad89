"""Quick versions of the reliability benchmarks (watcher.eval.bench.fuzz, watcher.eval.bench.load) on real
daemon subprocesses: malformed frames all answered or dropped with no crash; many agents streaming
while the daemon is killed with SIGKILL and restarted, with nothing lost."""

from __future__ import annotations

import pytest

from watcher.eval.bench.fuzz import FuzzSettings, run_fuzz
from watcher.eval.bench.load import LoadSettings, run_load


async def test_fuzz_every_frame_answered_or_dropped() -> None:
    r = await run_fuzz(FuzzSettings(frames=4000, peers=4, seed=7))
    assert r["crashes"] == 0 and r["daemon_exit_code"] == 0
    assert r["frames_malformed"] == 4000
    assert r["unanswered"] == 0 and r["wrong_answers"] == {}, r
    assert r["oversize_answered"] == 0 and r["dropped_oversize"] == r["frames_by_kind"]["oversize"] > 0
    assert r["answered_resync"] == r["frames_by_kind"]["sequence"]
    assert r["counters_match"] and r["internal_errors"] == 0
    assert set(r["frames_by_kind"]) >= {"random", "truncated", "types", "lengths", "version", "unknown"}
    assert r["good_proposals_applied"] > 0 and r["good_errors"] == 0
    assert r["goals_met"]


@pytest.mark.slow
async def test_load_with_kill_loses_nothing() -> None:
    r = await run_load(LoadSettings(agents=24, rate=5, seconds=10, budget=6000, model=False, kill_at=3))
    kill = r["kill"]
    assert kill["integrity_ok"], kill
    assert kill["agents_recovered"] == 24, kill
    assert r["lost_originals"] == 0 and r["recalled"] > 0
    assert r["mirror_mismatches"] == 0
    assert r["compactions"] > 0 and r["daemon_exit_code"] == 0
    assert r["queue_depth_max"] <= 24
    curve = [p for p in r["rss_curve"] if p[1] is not None]
    assert len(curve) >= 5 and all(mb > 0 for _, mb in curve)  # the RSS curve, once a second
    cpu = [v for _, v in r["client_cpu_pct_curve"] if v is not None]  # who used the cores
    assert cpu and r["worker_cpu_pct_curve"] and r["loadavg_curve"]
