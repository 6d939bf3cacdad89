"""Look-ahead: growth and job-time estimates, and the trigger they move."""

from __future__ import annotations

from watcher.lookahead import DEFAULT_JOB_S, Lookahead
from watcher.planner import Watermarks, should_plan, trigger_tokens


def test_no_growth_seen_means_no_look_ahead() -> None:
    la = Lookahead()
    assert la.tokens_ahead() == 0
    la.observe(1000, 0.0)  # the first observation only sets the baseline
    assert la.tokens_ahead() == 0


def test_steady_growth_projects_over_the_job_time_plus_one_turn() -> None:
    la = Lookahead()
    for k in range(10):  # 500 tokens every 2 s
        la.observe(1000 + 500 * k, 2.0 * k)
    assert la.turn_tokens == 500 and la.turn_s == 2.0
    assert la.job_s == DEFAULT_JOB_S
    assert la.tokens_ahead() == 500 * (DEFAULT_JOB_S / 2.0 + 1)
    la.job_done(10.0, 20_000)
    assert la.job_s == 10.0 and la.throughput == 2000.0
    assert la.tokens_ahead() == 500 * (10.0 / 2.0 + 1)
    snap = la.snapshot()
    assert snap["tokens_ahead"] == 3000 and snap["summarizer_tokens_per_s"] == 2000.0


def test_a_compaction_moves_the_baseline_but_is_not_growth() -> None:
    la = Lookahead()
    la.observe(1000, 0.0)
    la.observe(1600, 1.0)
    la.observe(400, 1.5)  # a proposal applied
    la.observe(1000, 2.0)  # +600 from the new baseline
    assert la.steps == 2 and la.turn_tokens == 600
    la.observe(1000, 3.0)  # no change: nothing to learn
    assert la.steps == 2


def test_estimates_are_moving_averages() -> None:
    la = Lookahead()
    la.observe(0, 0.0)
    la.observe(1000, 1.0)
    la.observe(1100, 2.0)
    assert 1000 > la.turn_tokens > 100
    la.job_done(2.0, 100)
    la.job_done(4.0, 100)
    assert 4.0 > la.job_s > 2.0


def test_trigger_comes_early_by_the_growth_but_at_most_half_the_gap() -> None:
    m = Watermarks(32000, 0.15, 0.6)
    assert trigger_tokens(m) == m.high - 1
    assert trigger_tokens(m, 1500) == m.high - 1 - 1500
    half = (m.high - m.low) // 2
    assert trigger_tokens(m, 10**9) == m.high - 1 - half
    assert trigger_tokens(m, -5) == m.high - 1
    assert not should_plan(m.high - 1, m) and should_plan(m.high, m)
    assert should_plan(m.high - 1500, m, 1500) and not should_plan(m.high - 1501, m, 1500)
