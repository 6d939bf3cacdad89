"""Look-ahead: growth and job-time estimates, and the trigger they move."""

from __future__ import annotations

import math

import pytest

from watcher.planning.lookahead import (
    BURST_SIGMAS,
    DEFAULT_FAST_JOB_S,
    HISTORY_SECTIONS,
    START_MAX_S,
    STEP_MAX_S,
    TAIL_DECAY,
    Lookahead,
)
from watcher.planning.planner import EARLY_SHARE, Watermarks, should_plan, trigger_tokens


def test_no_growth_seen_means_no_look_ahead() -> None:
    la = Lookahead()
    assert la.tokens_ahead() == 0 and la.tokens_ahead(8.0) == 0
    assert la.model_in_time(999, 1000, 8.0) and not la.model_in_time(1000, 1000, 8.0)
    la.observe(1000, 0.0)  # the first observation only sets the baseline
    assert la.tokens_ahead() == 0


def test_steady_growth_projects_over_the_job_time() -> None:
    la = Lookahead()
    for k in range(10):  # 500 tokens every 2 s: no variance, so the large turn is an average one
        la.observe(1000 + 500 * k, 2.0 * k)
    assert la.turn_tokens == 500 and la.turn_s == 2.0 and la.turn_var == 0
    # a deterministic job: its growth + a large turn (= an average one here)
    fast = math.ceil(500 * (DEFAULT_FAST_JOB_S / 2.0 + 1))
    assert la.tokens_ahead() == fast
    # a model job of 8 s (the measured cost, passed in): its growth + an average turn
    assert la.tokens_ahead(8.0) == 500 * (8.0 / 2.0 + 1)
    assert la.tokens_ahead(0.0) == fast  # never later than a deterministic job
    la.job_done(10.0, 20_000, model=True)
    assert la.throughput == 2000.0 and la.model_jobs == 1
    assert la.tokens_ahead() == fast  # a model job's time is not the agent's to remember
    la.job_done(0.2, 20_000, model=False)
    assert la.fast_job_s == 0.2
    snap = la.snapshot()
    assert snap["tokens_ahead"] == math.ceil(500 * (0.2 / 2.0 + 1)) and snap["fast_job_seconds"] == 0.2


def test_bursty_growth_looks_further_ahead() -> None:
    steady, bursty = Lookahead(), Lookahead()
    t = 0
    for k in range(20):
        steady.observe(1000 * (k + 1), 2.0 * k)
        t += 200 if k % 4 else 3400  # about the same mean, in bursts
        bursty.observe(t, 2.0 * k)
    sigma = math.sqrt(bursty.turn_var)
    assert steady.turn_var == 0 and sigma > 1000
    mean_part = bursty.turn_tokens * (DEFAULT_FAST_JOB_S / bursty.turn_s + 1)
    assert bursty.tokens_ahead() == pytest.approx(mean_part + BURST_SIGMAS * sigma, abs=1)
    assert bursty.tokens_ahead() > steady.tokens_ahead()


def test_the_model_is_used_only_when_its_digest_would_be_in_time() -> None:
    la = Lookahead()
    for k in range(10):
        la.observe(1000 + 500 * k, 2.0 * k)
    high = 27200
    # 10 s of model work: 5 turns of 500 tokens while it reads
    assert la.model_in_time(high - 2501, high, 10.0)
    assert not la.model_in_time(high - 2500, high, 10.0)
    assert la.model_in_time(high - 251, high, 1.0)  # a cheaper job (fewer tokens to read) fits later
    # at the trigger (the turn that crosses it lands anywhere in the last one) the model is in time
    trigger = high - 1 - la.tokens_ahead(10.0)
    assert la.model_in_time(trigger + 500, high, 10.0)


def test_the_time_a_model_job_has_is_the_time_to_the_limit_at_the_pace() -> None:
    la = Lookahead()
    assert la.seconds_until(100, 1000) == math.inf  # no growth seen: no bound
    for k in range(10):
        la.observe(1000 + 500 * k, 2.0 * k)
    high = 27200
    assert la.seconds_until(high - 2500, high) == pytest.approx(10.0)
    assert la.seconds_until(high, high) == 0.0 and la.seconds_until(high + 9, high) == 0.0
    # consistent with model_in_time: a job shorter than the time left is in time, a longer one not
    left = la.seconds_until(high - 1800, high)
    assert la.model_in_time(high - 1800, high, left * 0.99)
    assert not la.model_in_time(high - 1800, high, left * 1.01)


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
    la.job_done(2.0, 100, model=False)
    la.job_done(4.0, 100, model=False)
    assert 4.0 > la.fast_job_s > 2.0


def test_trigger_comes_early_by_the_growth_but_within_the_gap() -> None:
    m = Watermarks(32000, 0.15, 0.6)
    assert trigger_tokens(m) == m.high - 1
    assert trigger_tokens(m, 1500) == m.high - 1 - 1500
    cap = int((m.high - m.low) * EARLY_SHARE)
    assert trigger_tokens(m, 10**9) == m.high - 1 - cap > m.low, "never at the low mark: no loop"
    assert trigger_tokens(m, -5) == m.high - 1
    assert not should_plan(m.high - 1, m) and should_plan(m.high, m)
    assert should_plan(m.high - 1500, m, 1500) and not should_plan(m.high - 1501, m, 1500)


def test_a_turn_sent_as_a_burst_of_deltas_is_one_growth_step() -> None:
    one, burst = Lookahead(), Lookahead()
    one.observe(0, 0.0)
    burst.observe(0, 0.0)
    for k in range(1, 6):  # a 1000-token turn every 2 s: in one delta, or in ten 100-token deltas
        one.observe(1000 * k, 2.0 * k)
        for d in range(10):
            burst.observe(1000 * (k - 1) + 100 * (d + 1), 2.0 * k + 0.01 * d)
    assert burst.steps == one.steps == 5
    assert burst.turn_tokens == one.turn_tokens == 1000
    assert abs(burst.turn_s - 2.0) < 0.05
    assert burst.tokens_ahead() <= one.tokens_ahead() * 1.05  # not hundreds of steps per second


def test_history_sent_back_to_back_at_attach_is_the_start_not_a_turn() -> None:
    la = Lookahead()
    for k in range(40):  # 40 turns of history, 500 tokens each, appended 5 ms apart
        la.observe(500 * (k + 1), 0.005 * k)
    assert la.steps == 0 and la.tokens_ahead() == 0
    for k in range(1, 4):  # then the agent's own turns, every 2 s
        la.observe(20_000 + 300 * k, 2.0 * k)
    assert la.steps == 3 and la.turn_tokens == 300 and la.turn_var == 0


def test_an_agent_streaming_without_pause_is_seen_growing_not_starting_forever() -> None:
    """Deltas every 0.2 s (closer than TURN_GAP_S) for a minute: past START_MAX_S they are growth,
    in steps of at most STEP_MAX_S, and the growth per second is measured whatever the steps."""
    la = Lookahead()
    la.observe(0, 0.0)
    for k in range(1, 301):  # 300 tokens every 0.2 s = 1500 tokens/s
        la.observe(300 * k, 0.2 * k)
    assert la.steps > 20  # ~50 s of growth in steps of <= STEP_MAX_S
    assert la.turn_tokens <= 300 * (STEP_MAX_S / 0.2 + 1)
    assert la.rate == pytest.approx(1500, rel=0.05)
    assert la.tokens_ahead() > 0  # the look-ahead sees it coming
    assert la.deadline(60_000, 64_000, 60.0) < 60.0 + 10  # ~4 000 tokens from its limit: seconds away


def test_a_history_of_two_seconds_is_still_the_start() -> None:
    la = Lookahead()
    la.observe(0, 0.0)
    for k in range(1, 200):  # 200 sections, 10 ms apart: the history
        la.observe(500 * k, 0.01 * k)
    assert la.steps == 0 and la.rate == 0 and la.tokens_ahead() == 0
    assert START_MAX_S > 2.0  # (the history above took 2 s)


# budget 24 000, high watermark 20 400, low 16 800: the reserve holds a turn of 3 600 tokens, a plan
# can make room for one of 7 200 at most
RESERVE, FIT = 3_600, 7_200


def test_a_turn_larger_than_the_reserve_is_planned_for_while_it_is_recent() -> None:
    """A streak of large tool outputs: after a 6 000-token turn the plan comes early enough that
    another one fits the budget (the part of it the reserve would not hold), fading turn by turn,
    once the large-turn margin (mean + 2 sigma, which forgets faster) no longer covers it. An agent
    whose turns fit its reserve plans as before."""
    la, calm = Lookahead(), Lookahead()
    t = 1_000
    for k in range(8):  # small turns, then one of 6 000 tokens
        t += 6_000 if k == 7 else 300
        la.observe(t, 2.0 * k)
        calm.observe(1_000 + 300 * (k + 1), 2.0 * k)
    assert la.tail == 6_000 and la.largest(FIT) == 6_000
    assert la.tail_over(RESERVE, FIT) == 2_400
    assert la.tokens_ahead(reserve=RESERVE, fit=FIT) == la.tokens_ahead() > 6_000  # mean + 2 sigma
    assert calm.tail_over(RESERVE, FIT) == 0
    assert calm.tokens_ahead(reserve=RESERVE, fit=FIT) == calm.tokens_ahead()
    for k in range(8, 16):  # eight small turns: mean + 2 sigma has forgotten most of it
        t += 300
        la.observe(t, 2.0 * k)
    small_reserve = 1_200  # (a reserve of 5 %)
    over = la.tail_over(small_reserve, FIT)
    assert over == math.ceil(6_000 * TAIL_DECAY**8) - small_reserve
    assert la.tokens_ahead(reserve=small_reserve, fit=FIT) >= over > la.tokens_ahead()
    for k in range(16, 48):  # small turns again: the large one fades
        t += 300
        la.observe(t, 2.0 * k)
    assert la.tail == pytest.approx(6_000 * TAIL_DECAY**40)
    assert la.tail_over(small_reserve, FIT) == 0
    assert la.snapshot()["largest_turn_tokens"] == round(la.tail)


def test_the_largest_turn_counts_only_what_a_plan_can_make_room_for() -> None:
    la = Lookahead()
    la.observe(1_000, 0.0)
    la.observe(1_300, 2.0)
    la.observe(31_300, 4.0)  # 30 000 tokens in one turn: no plan makes room for that
    assert la.largest(FIT) == FIT and la.tail_over(RESERVE, FIT) == FIT - RESERVE
    assert la.tail_over(0, 0) == 0  # not counted unless asked (the planner bench, plansim)


def test_the_history_sent_at_attach_tells_the_largest_turn() -> None:
    """An agent attaching with a context that holds a 6 000-token tool output has its next plan
    early enough for another one, before it has taken a turn of its own."""
    la = Lookahead()
    sizes = [8_000, 3_100, 6_000, 2_100]  # the history's turns, appended back to back
    t = 0
    for k, size in enumerate(sizes):
        t += size
        la.observe(t, 0.01 * k)
    assert la.steps == 0
    assert la.tail == 6_000 * TAIL_DECAY  # one turn since (the first append is the baseline to
    # observe; the daemon passes its sections to Lookahead.history: the test below)
    assert la.tokens_ahead(reserve=RESERVE, fit=FIT) == la.tail_over(RESERVE, FIT) > 2_000
    assert la.tokens_ahead() == 0  # without the room: as before


def test_a_step_continued_keeps_one_tail() -> None:
    """Deltas of one step (closer than TURN_GAP_S) are one turn: the tail is the step's tokens."""
    la = Lookahead()
    la.observe(0, 0.0)
    la.observe(100, 2.0)
    for k in range(1, 5):  # one step of 4 x 1 000 tokens, 50 ms apart
        la.observe(100 + 1_000 * k, 4.0 + 0.05 * k)
    assert la.steps == 2 and la.tail == 4_000


def test_a_history_seen_at_once_tells_the_largest_turn_as_its_appends_would() -> None:
    """A history that arrives in one SNAPSHOT (an agent resuming its session through the proxy or an
    adapter) has its sections counted as the turns of one appended section by section are: the same
    tail from the last section on, and the same plan before the agent's first turn."""
    sizes = [2_000, 3_100, 6_000, 2_100]
    appended = Lookahead()
    appended.history([("user", sizes[0])])  # what the daemon passes on the first change: its sections
    t = 0
    for k, size in enumerate(sizes):
        t += size
        appended.observe(t, 0.01 * k)
    at_once = Lookahead()
    assert not at_once.seen
    at_once.history(("tool_result", n) for n in sizes)
    at_once.observe(sum(sizes), 0.0)
    assert at_once.seen and at_once.steps == 0
    assert at_once.tail == appended.tail == 6_000 * TAIL_DECAY
    assert at_once.tokens_ahead(reserve=RESERVE, fit=FIT) == at_once.tail_over(RESERVE, FIT) > 2_000
    calm = Lookahead()
    calm.history(("tool_result", n) for n in [8_000, *[1_000] * 40])  # long ago: faded under the reserve
    assert calm.tail_over(RESERVE, FIT) == 0
    prompts = Lookahead()  # a system prompt and an earlier digest are not turns the agent took
    prompts.history([("system", 9_000), ("digest", 9_000), ("user", 100)])
    assert prompts.tail == 100
    old = Lookahead()  # only the last HISTORY_SECTIONS sections are read
    old.history([("tool_result", 9_000), *[("tool_result", 1)] * HISTORY_SECTIONS])
    assert old.tail == 1
