"""Deadline-first scheduling: the agent whose next turn would cross its budget first goes first;
an agent far from its budget still runs (aging); latest wins per agent."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ipc.client import AgentLink
from ipc.context import Context
from ipc.sections import Section
from tests.fixtures.daemon import wait_until
from watcher.eval.harness import DaemonProcess
from watcher.planning.lookahead import FAR_S, Lookahead
from watcher.planning.planner import Watermarks
from watcher.serve import scheduler as scheduler_module
from watcher.serve.jobs import Jobs
from watcher.serve.scheduler import DETERMINISTIC_LANES, FairScheduler, Fallback, Job
from watcher.serve.session import Session

pytestmark = pytest.mark.serial  # races the machine's own speed (tests/conftest.py)


def recorder(order: list[str], key: str, hold: float = 0.0) -> Job:
    async def run() -> None:
        order.append(key)
        await asyncio.sleep(hold)

    return run


async def occupy(sched: FairScheduler) -> asyncio.Event:
    """Fill every deterministic lane with a job that waits for the returned gate."""
    gate = asyncio.Event()
    started = 0

    async def blocker() -> None:
        nonlocal started
        started += 1
        await gate.wait()

    for i in range(DETERMINISTIC_LANES):
        sched.submit(f"blocker-{i}", blocker)
    await wait_until(lambda: started == DETERMINISTIC_LANES, 5, "the lanes are busy")
    return gate


async def test_the_earliest_deadline_goes_first_whatever_the_order_of_joining() -> None:
    sched = FairScheduler(has_model=lambda: False)
    gate = await occupy(sched)
    order: list[str] = []
    now = time.monotonic()
    deadlines = {"far": 25.0, "later": 22.0, "soon": 5.0, "mid": 15.0, "now": 0.5, "past": -3.0}
    for key, d in deadlines.items():  # joined in this order
        sched.submit(key, recorder(order, key), lambda d=d: now + d)
    sched.submit("no-deadline", recorder(order, "no-deadline"))  # counts as MAX_WAIT_S (30 s) away
    assert sched.depth == 7
    gate.set()
    await wait_until(lambda: len(order) == 7, 5, "every job ran")
    assert order == ["past", "now", "soon", "mid", "later", "far", "no-deadline"], order
    assert sched.late == 1  # "past" started after its deadline
    await sched.close()


async def test_a_deadline_is_read_when_the_worker_picks() -> None:
    """A waiting agent that grew meanwhile (its deadline came closer) goes first; latest wins."""
    sched = FairScheduler(has_model=lambda: False)
    gate = await occupy(sched)
    order: list[str] = []
    now = time.monotonic()
    deadline = {"a": now + 10, "b": now + 20}
    sched.submit("a", recorder(order, "a-old"), lambda: deadline["a"])
    sched.submit("b", recorder(order, "b"), lambda: deadline["b"])
    sched.submit("a", recorder(order, "a"), lambda: deadline["a"])  # latest wins, one slot
    deadline["b"] = now + 1  # b's context grew: its next turn crosses its budget sooner
    gate.set()
    await wait_until(lambda: len(order) == 2, 5, "both ran")
    assert order == ["b", "a"] and sched.coalesced == 1
    await sched.close()


async def test_an_agent_far_from_its_budget_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Urgent agents keep coming, each past its deadline; the far one runs once it has waited
    MAX_WAIT_S, before every urgent job that joined after that."""
    monkeypatch.setattr(scheduler_module, "MAX_WAIT_S", 0.2)
    sched = FairScheduler(has_model=lambda: False)
    order: list[str] = []
    stop = time.monotonic() + 5
    made = itertools.count()

    def urgent() -> None:
        key = f"u{next(made)}"

        async def run() -> None:
            order.append(key)
            await asyncio.sleep(0.01)
            if "far" not in order and time.monotonic() < stop:
                urgent()  # each urgent job brings two more: the lanes are never idle
                urgent()

        sched.submit(key, run, lambda: time.monotonic() - 1)

    for _ in range(DETERMINISTIC_LANES + 1):
        urgent()
    t0 = time.monotonic()
    sched.submit("far", recorder(order, "far"), lambda: time.monotonic() + FAR_S)
    await wait_until(lambda: "far" in order, 5, "the far agent ran")
    waited = time.monotonic() - t0
    assert 0.15 <= waited < 1.0, waited
    assert len(order) > 5 and sched.aged >= 1
    await sched.close()


def test_deadline_from_the_look_ahead() -> None:
    la = Lookahead()
    assert la.deadline(100, 1000, 5.0) == 5.0 + FAR_S  # no growth seen yet
    for k in range(10):  # 100 tokens every 2 s
        la.observe(1000 + 100 * k, 2.0 * k)
    at = 18.0  # the last growth: 1900 tokens
    # room 1100 - a large turn (100: no variance) = 1000 = 10 turns, then the next one crosses
    assert la.deadline(1900, 3000, at) == at + 2.0 * 11
    assert la.deadline(1900, 3000, at, margin=False) == at + 2.0 * 12  # average turns only: 11 fit
    assert la.deadline(1900, 2050, at) == at + 2.0  # the next turn crosses
    assert la.deadline(1900, 1900, at + 7) == at  # already over: its deadline was its last growth
    near, far = la.deadline(1900, 2500, at), la.deadline(1900, 9000, at)
    assert near < far <= at + FAR_S
    # the reserve as the least margin: its turns are small (100), but a context in its reserve
    # (the last 400 tokens of a 3000 budget) is due at its next turn, and one under it when it
    # would reach it
    assert la.deadline(2700, 3000, at, reserve=400) == at + 2.0
    assert la.deadline(1900, 3000, at, reserve=400) == at + 2.0 * 8  # 700 of room = 7 turns
    assert la.deadline(1900, 3000, at, reserve=50) == at + 2.0 * 11  # a large turn is more
    assert la.deadline(1900, 3000, at, margin=False, reserve=400) == at + 2.0 * 12  # no margin


def test_the_schedulers_order_keeps_the_reserve_above_the_high_watermark() -> None:
    """The scheduler's order (Jobs.deadline) takes the reserve above the high watermark as the least
    margin: an agent with small turns already in its reserve is due at its next turn, before an
    agent under its high watermark whose large turns made it the nearer one to its budget (the
    order of Jobs.due, which the express checks keep). Measured in stop 40: at 1 600 agents with
    the model, stalled calls 6-16 against 25-64 (docs/BENCHMARKS.md)."""
    marks = Watermarks(40_000, 0.15, 0.6)  # high 34 000: a reserve of 6 000

    def session(name: str, tokens: int, turns: list[int]) -> Session:
        la = Lookahead()
        total = 1_000
        for k, grew in enumerate([0, *turns]):  # one turn every 2 s
            total += grew
            la.observe(total, 2.0 * k)
        sec = Section(f"{name}-all", "tool_result", "x", tokens=tokens)
        return Session(name, "s", b"peer", marks, ctx=Context([sec]), lookahead=la)

    small = session("in-reserve", 35_000, [100] * 12)  # 100 tokens a turn, 1 000 over its high mark
    bursty = session("under-high", 32_000, [100, 2_500] * 6)  # large turns, 2 000 under it
    assert Jobs.deadline(small) == 24.0 + 2.0  # its next turn
    assert Jobs.deadline(small) < Jobs.deadline(bursty)
    assert Jobs.due(bursty) < Jobs.due(small)  # by the budget alone the bursty one is nearer


@pytest.mark.slow
async def test_a_near_budget_agent_is_served_before_earlier_far_ones(tmp_path: Path) -> None:
    """A real daemon (no model): six agents far from their budget and one near it cross their
    compaction trigger in the same burst, the near one last; its proposal comes among the first
    (round-robin would serve it last)."""
    proc = DaemonProcess(tmp_path, None, model=False)
    await proc.wait_ready(30)
    try:
        far = [AgentLink(proc.endpoint, agent=f"far-{i}", budget=40_000, timeout_s=20) for i in range(6)]
        near = AgentLink(proc.endpoint, agent="near", budget=8_000, timeout_s=20)
        links = [*far, near]
        for link in links:
            await link.connect()

        def sec(link: AgentLink, n: int, tokens: int) -> Section:
            text = "".join(f"{link.agent} line {n}.{j}: value={n * 7 + j}\n" for j in range(tokens // 12))
            return Section(f"{link.agent}-{n}", "tool_result", text, tokens=tokens)

        # the same growth for all (500 tokens a turn every 0.3 s), below their triggers (high watermark
        # minus the look-ahead's 1 333 tokens); the first SNAPSHOT is the look-ahead's baseline
        starts = {link.agent: (29_000 if link in far else 3_800) for link in links}
        for link in links:
            await link.snapshot([sec(link, i, 500) for i in range(starts[link.agent] // 500)])
        for turn in range(3):
            await asyncio.sleep(0.3)
            await asyncio.gather(*(link.append(sec(link, 100 + turn, 500), wait=True) for link in links))
        assert all(link.proposals.empty() for link in links), "nobody crossed a trigger yet"
        # the burst: far agents first, the near one last. Then far agents are two turns from their
        # budget (32 500 of 40 000, under their high watermark, 34 000, by more than a large turn:
        # the scheduler keeps their reserve, 6 000 tokens), the near one's next turn crosses it
        # (7 300 of 8 000)
        for link in links:
            await link.append(sec(link, 200, 2_000), wait=False)
        arrivals: list[str] = []

        async def first_proposal(link: AgentLink) -> None:
            await asyncio.wait_for(link.proposals.get(), 60)
            arrivals.append(link.agent)

        await asyncio.gather(*(first_proposal(link) for link in links))
        assert arrivals.index("near") < DETERMINISTIC_LANES + 1, arrivals
        for link in links:
            await link.close()
    finally:
        proc.stop()


async def test_an_agent_always_past_its_deadline_gets_a_turn_per_cycle_not_every_other() -> None:
    """A hopeless agent (over its budget again as soon as it is served: its deadline always past)
    goes after the agents that were waiting when its last job ended, instead of before all of
    them every time."""
    sched = FairScheduler(has_model=lambda: False)
    order: list[str] = []
    now = time.monotonic()
    hog_jobs = 0

    def hog() -> Job:
        async def run() -> None:
            nonlocal hog_jobs
            order.append("hog")
            hog_jobs += 1
            await asyncio.sleep(0.02)
            if hog_jobs < 20:  # over its budget again at once: back in the queue, its deadline past
                sched.submit("hog", hog(), lambda: time.monotonic() - 1.0)

        return run

    gate = await occupy(sched)
    for i in range(12):  # agents due within a queue cycle (12 x 20 ms / the lanes), the hog long overdue
        sched.submit(f"quiet-{i}", recorder(order, f"quiet-{i}", 0.02), lambda: now + 0.1)
    sched.submit("hog", hog(), lambda: time.monotonic() - 1.0)
    gate.set()
    await wait_until(lambda: all(f"quiet-{i}" in order for i in range(12)), 10, "the quiet agents ran")
    served_before = order[: max(order.index(f"quiet-{i}") for i in range(12)) + 1]
    # earliest deadline first still serves the hog first, but then the agents waiting have their
    # turn before its next (without that rule it took every other turn until their deadlines: 5+)
    assert served_before[0] == "hog"
    assert served_before.count("hog") <= 2, served_before
    await wait_until(lambda: hog_jobs == 20, 10, "the hog kept being served")
    await sched.close()


async def test_a_long_queue_reuses_its_line_and_places_an_urgent_joiner_in_it_at_once() -> None:
    """With PASS_REUSE_MIN or more waiting, the lanes take the next job of the last pass's line
    (passes far fewer than the jobs and joins); an agent that joins later with the most urgent
    deadline takes its place in that line at once: it is the next job to start, ahead of the older
    line; every agent is served once, and the line otherwise keeps deadline order."""
    sched = FairScheduler(has_model=lambda: False)
    hold = 0.01
    warm: list[str] = []
    for i in range(DETERMINISTIC_LANES):  # a measured job time: passes compute lines from then on
        sched.submit(f"warm-{i}", recorder(warm, f"warm-{i}", hold))
    await wait_until(lambda: sched.served == DETERMINISTIC_LANES, 5, "the warm-up jobs ran")
    gate = await occupy(sched)
    order: list[str] = []
    now = time.monotonic()
    n = 4 * scheduler_module.PASS_REUSE_MIN
    for i in range(n):  # joined in reverse deadline order
        sched.submit(f"a{i:03d}", recorder(order, f"a{i:03d}", hold), lambda i=i: now + 20.0 - 0.05 * i)
    gate.set()
    await wait_until(lambda: len(order) >= n // 4, 10, "a quarter of the line was served")
    served_before = len(order)
    sched.submit("urgent", recorder(order, "urgent", hold), lambda: now - 1.0)
    await wait_until(lambda: "urgent" in order, 5, "the urgent joiner was served")
    behind = order.index("urgent") - served_before  # jobs started before it, after it joined
    assert behind <= DETERMINISTIC_LANES, (behind, order)  # a lane that freed meanwhile, at most
    await wait_until(lambda: len(order) >= n // 2, 10, "half the line was served")
    assert sched.passes < n // 4, sched.passes  # a pass per start and per join: over n
    await wait_until(lambda: len(order) == n + 1, 20, "every job ran")
    assert sorted(order) == sorted({*order})  # each once
    rest = [k for k in order if k != "urgent"]
    assert rest == sorted(rest, reverse=True), rest  # deadline order: the last to join went first
    await sched.close()


def slow_deadline(
    at: float, spin_s: float, seen: list[tuple[int, int]], sched: FairScheduler, ticks: list[int]
) -> Callable[[], float]:
    """A deadline that takes ``spin_s`` of CPU to read (a busy agent's look-ahead on a slow
    machine) and records (the scheduler's pass count, the ticker's count) each time it is read."""

    def read() -> float:
        end = time.perf_counter() + spin_s
        while time.perf_counter() < end:
            pass
        seen.append((sched.passes, ticks[0]))
        return at

    return read


async def long_queue(
    n: int, spin_s: float
) -> tuple[FairScheduler, asyncio.Event, list[tuple[int, int]], int, asyncio.Task[None]]:
    """A scheduler with a measured job time, its lanes held, ``n`` jobs waiting whose deadlines
    are slow to read, and a ticker task that counts its turns of the loop."""
    sched = FairScheduler(has_model=lambda: False)
    warm: list[str] = []
    for i in range(DETERMINISTIC_LANES):  # a measured job time: passes compute lines from then on
        sched.submit(f"warm-{i}", recorder(warm, f"warm-{i}", 0.01))
    await wait_until(lambda: sched.served == DETERMINISTIC_LANES, 5, "the warm-up jobs ran")
    gate = await occupy(sched)
    ticks = [0]

    async def ticker() -> None:  # what the loop's other work (frames) sees of a pass
        while True:
            ticks[0] += 1
            await asyncio.sleep(0)

    tick = asyncio.create_task(ticker())
    seen: list[tuple[int, int]] = []
    now = time.monotonic()
    ran: list[str] = []
    for i in range(n):
        sched.submit(
            f"a{i:04d}",
            recorder(ran, f"a{i:04d}"),
            slow_deadline(now + 20.0 - 0.001 * i, spin_s, seen, sched, ticks),
        )
    return sched, gate, seen, sched.passes + 1, tick  # the next pass is the first over them


async def test_a_pass_over_a_long_queue_lets_the_loop_run_between_its_slices() -> None:
    """A pass over 2 000 waiting jobs whose deadlines cost 20 us each to read (40 ms in all) yields
    to the loop every PASS_SLICE_S or so: other tasks (the frames of every agent) run while it reads
    them, not after; the line it makes is still in deadline order."""
    n, spin = 2000, 20e-6
    sched, gate, seen, first, tick = await long_queue(n, spin)
    await wait_until(lambda: len([p for p, _ in seen if p == first]) >= n, 10, "a pass")
    slices = len({t for p, t in seen if p == first})  # the ticker ran between two reads: the pass had yielded
    assert slices >= n * spin / scheduler_module.PASS_SLICE_S / 4, slices  # ~20 slices; without: 1
    # its cost: the slices' time (at least the reads'), measured when it ends
    await wait_until(lambda: sched.stats()["pass_ms_max"] >= n * spin * 1000, 10, "the pass ended")
    gate.set()
    await wait_until(lambda: sched.served >= n + 2 * DETERMINISTIC_LANES, 30, "every job ran")
    tick.cancel()
    await sched.close()


async def test_a_long_queues_passes_take_a_bounded_share_of_the_loop() -> None:
    """While a long queue waits with its lanes held, passes are timed: the next comes when the
    last one's cost is at most PASS_SHARE of the time since (a 40 ms pass: not for 0.8 s), not every
    PASS_EVERY_S (0.1 s: eight passes in that time)."""
    n, spin = 2000, 20e-6
    sched, gate, _, first, tick = await long_queue(n, spin)
    await wait_until(lambda: sched.stats()["pass_ms_max"] >= n * spin * 1000, 10, "the first pass")
    cost_s = sched.stats()["pass_ms_max"] / 1000
    assert cost_s / scheduler_module.PASS_SHARE > 4 * scheduler_module.PASS_EVERY_S  # the case tested
    await asyncio.sleep(0.5 * cost_s / scheduler_module.PASS_SHARE)
    assert sched.passes == first, (sched.passes, first)  # before: a pass each PASS_EVERY_S
    wait_s = 10 + 2 * cost_s / scheduler_module.PASS_SHARE
    await wait_until(lambda: sched.passes > first, wait_s, "the next pass")
    gate.set()
    tick.cancel()
    await sched.close()


async def test_an_agent_joining_a_kept_line_gets_its_express_check_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a long queue's line is kept (no pass due), an agent that joins behind it and whose
    turn there would come after its fallback's due time runs its fallback at once, without a
    pass; the agents in front, whose fallbacks are not due, keep waiting for their turn."""
    monkeypatch.setattr(scheduler_module, "PASS_EVERY_S", 30.0)  # no timed pass in this test
    sched = FairScheduler(has_model=lambda: False)
    hold = 0.05
    warm: list[str] = []
    for i in range(DETERMINISTIC_LANES):  # a measured job time
        sched.submit(f"warm-{i}", recorder(warm, f"warm-{i}", hold))
    await wait_until(lambda: sched.served == DETERMINISTIC_LANES, 5, "the warm-up jobs ran")
    gate = await occupy(sched)
    normal: list[str] = []
    cheap: list[str] = []
    now = time.monotonic()
    n = scheduler_module.PASS_REUSE_MIN + 8
    for i in range(n):  # in front of the joiner, their fallbacks never due
        key = f"a{i:03d}"
        never = Fallback(recorder(cheap, key), lambda: math.inf)
        sched.submit(key, recorder(normal, key, hold), lambda i=i: now + 0.5 + 0.001 * i, never)
    await asyncio.sleep(0.05)  # the worker made its pass over them
    passes = sched.passes
    assert passes >= 1 and not cheap
    due = now + 1.0  # n jobs of `hold` on the lanes in front of it take longer than that
    sched.submit(
        "late", recorder(normal, "late", hold), lambda: due, Fallback(recorder(cheap, "late"), lambda: due)
    )
    await wait_until(lambda: "late" in cheap, 2, "the joiner's fallback ran")
    assert sched.passes == passes and cheap == ["late"] and sched.expedited == 1
    gate.set()
    await wait_until(lambda: len(normal) == n, 20, "the line was served")
    assert "late" not in normal
    await sched.close()


async def test_a_waiting_job_whose_turn_would_come_too_late_runs_its_cheap_job_at_once() -> None:
    """A herd joins together with the same short deadline: those whose place in line (at the
    measured job time, over the lanes) would finish after it run their cheap job at once, outside
    the lanes; the front of the line waits for its normal job; an agent without a cheap job waits."""
    sched = FairScheduler(has_model=lambda: False)
    hold = 0.05
    warm: list[str] = []
    for i in range(DETERMINISTIC_LANES):  # measures a deterministic job's time (about `hold`)
        sched.submit(f"warm-{i}", recorder(warm, f"warm-{i}", hold))
    await wait_until(lambda: sched.served == DETERMINISTIC_LANES, 5, "the warm-up jobs ran")
    assert sched.det_run_s >= hold
    normal: list[str] = []
    cheap: list[str] = []
    t0 = time.monotonic()
    herd = [f"a{i:02d}" for i in range(30)]
    for key in herd:  # the same deadline: in line in the order of joining
        fallback = Fallback(recorder(cheap, key), lambda: t0 + 0.4)
        sched.submit(key, recorder(normal, key, hold), lambda: t0 + 0.4, fallback)
    sched.submit("plain", recorder(normal, "plain", hold), lambda: t0 + 0.4)  # no cheap job: waits
    await wait_until(lambda: len(normal) + len(cheap) == len(herd) + 1, 10, "every agent was served")
    assert cheap and normal[0] == "a00", (normal, cheap)
    assert sched.expedited == len(cheap) and "plain" in normal
    # the line's back went express, its front kept its normal job
    assert max(herd.index(k) for k in normal if k != "plain") < min(herd.index(k) for k in cheap)
    assert len(cheap) >= len(herd) // 3  # 30 jobs of 50 ms on 2 lanes take 0.75 s: half are too late
    await sched.close()


def test_a_streaming_agents_deadline_comes_closer_as_its_context_does() -> None:
    """Appends every 0.2 s are one step after another to the turn estimates (each ended by
    STEP_MAX_S); the deadline follows the measured tokens per second, so near the limit it is near,
    not a step away as each new append made it."""
    la = Lookahead()
    t, tokens = 0.0, 1000
    while t < 20:
        la.observe(tokens, t)
        t, tokens = round(t + 0.2, 3), tokens + 300
    assert la.streaming and 1300 < la.rate < 1700
    last = round(t - 0.2, 3)  # 1 500 tokens/s
    far = la.deadline(20_000, 32_000, last, margin=False)
    near = la.deadline(31_500, 32_000, last, margin=False)
    assert far - last == pytest.approx(12_000 / la.rate, rel=0.01)
    assert near - last == pytest.approx(500 / la.rate, rel=0.01) and near - last < 0.5
    turns = Lookahead()
    for k in range(10):  # a turn every 2 s: not a stream, the turn model as before
        turns.observe(1000 + 100 * k, 2.0 * k)
    assert not turns.streaming
