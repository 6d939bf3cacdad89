"""The default configuration end to end: a `compactd run` with NO config file (look-ahead on, the
default weights), the real model, a real trajectory streamed through AgentLink at an agent's pace.
Model jobs run (budgeted from the prefill rate measured at warm-up, watcher.serve.modelcost), and
the agent never waits for room and never overflows."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from ipc.client import AgentLink
from ipc.protocol import Proposal
from ipc.sections import Section
from summarizer.tokenizer import load_counter
from tests.fixtures.daemon import log_events, status, wait_event
from watcher.eval.harness import DaemonProcess, running_daemon
from watcher.eval.trajectories import load

pytestmark = pytest.mark.serial  # races the machine's own speed (tests/conftest.py)

BUDGET = 16000  # the default reserve 0.15 and low watermark 0.7: high 13 600, low 11 200
START_FILL = 11000  # tokens of history sent at attach (back to back): under the trigger
PACE_S = 3.0  # the agent's own LLM call per turn
TIMED_S = 60.0  # the paced part
ROOM_WAIT_S = 20.0  # a call waits at most this long for room; then it overflows


@pytest.fixture
async def default_daemon(tmp_path: Path, model_path: str) -> AsyncIterator[DaemonProcess]:
    async with running_daemon(tmp_path, None, model=True) as proc:  # no config file at all
        yield proc


async def _apply(link: AgentLink, applied: list[Proposal], changed: asyncio.Event) -> None:
    while True:
        p = await link.proposals.get()
        if await link.apply(p):
            applied.append(p)
        changed.set()


@pytest.mark.slow
async def test_defaults_run_model_jobs_without_stalls(
    default_daemon: DaemonProcess, trajectories: Path, model_path: str
) -> None:
    daemon = default_daemon
    await wait_event(daemon, "model_warmed", within=60)  # the prefill rate is measured at load
    traj = load(
        trajectories / "mini-swe-agent" / "pylint-dev__pylint-6528.traj.json", count=load_counter(model_path)
    )[0]
    turns = iter(traj.turns)
    applied: list[Proposal] = []
    stalls: list[float] = []
    overflows = calls = 0
    changed = asyncio.Event()
    async with AgentLink(daemon.endpoint, agent="defaults", budget=BUDGET) as link:
        low = int(link.welcome["low_watermark"])
        history: list[Section] = []
        for turn in turns:  # the history, in one append (not growth: watcher.planning.lookahead)
            if sum(s.tokens for s in history + turn) <= START_FILL:
                history += turn
            if sum(s.tokens for s in history) >= START_FILL - 1000:
                break
        await link.append(*history, wait=True)
        await asyncio.sleep(PACE_S)
        applier = asyncio.create_task(_apply(link, applied, changed))
        try:
            end = time.monotonic() + TIMED_S
            for turn in turns:
                if time.monotonic() >= end:
                    break
                await link.append(*turn, wait=True)
                t0 = time.monotonic()  # the agent's LLM call: the context must fit its budget
                while link.context.tokens > BUDGET and time.monotonic() - t0 < ROOM_WAIT_S:
                    changed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(changed.wait(), 0.5)
                calls += 1
                # a turn bigger than budget - low watermark fits no context compacted ahead of it:
                # its wait is not the daemon's (counted apart, as bench load does)
                if sum(s.tokens for s in turn) <= BUDGET - low:
                    stalls.append(time.monotonic() - t0 if time.monotonic() - t0 > 0.001 else 0.0)
                    overflows += link.context.tokens > BUDGET
                await asyncio.sleep(PACE_S)
        finally:
            applier.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await applier
        data = await status(daemon)
        methods, cost = data["daemon"]["digest_methods"], data["daemon"]["model_cost"]
        queue = data["daemon"]["compaction_queue"]
    assert calls >= 10, f"only {calls} paced turns"
    assert overflows == 0 and max(stalls) == 0.0, (overflows, stalls)
    assert applied, "no compaction was applied"
    by_method = [p.digest[0].meta.get("method") for p in applied]
    why = json.dumps(
        [by_method, methods, cost, log_events(daemon, "model_budget"), log_events(daemon, "model_late")]
    )
    # the model's path ran at the defaults: jobs in the model lane, decided in time by the measured
    # cost, their digests the model's or turned down by the summarizer's own checks (at q4_0 most
    # gists are: docs/BENCHMARKS.md "The model at the defaults"), never skipped for a constant
    assert queue["model_jobs"] >= 1 and cost["jobs"] >= 1, why
    skipped = methods["model_skipped"]
    assert methods["model"] + skipped["not_shown"] + skipped["too_small"] + skipped["late"] >= 1, why
    assert any(e["in_time"] for e in log_events(daemon, "model_budget")), why
    assert queue["features_in_worker"] > 0, queue  # the planner's features came from the worker
    assert data["daemon"]["read_ahead"]["sections"] >= 1, data["daemon"]["read_ahead"]  # idle: it read


async def model_job_planned(
    daemon: DaemonProcess, link: AgentLink, note: str, count: Callable[[str], int], high: int
) -> dict[str, Any]:
    """The first ``model_budget`` event. How early the look-ahead plans follows the model's cost
    measured at warm-up (a busy machine measures it slower, and a model job that would start more
    than 3/4 of the way between the watermarks plans as late as a deterministic one): where a turn
    leaves the context short of that trigger, the agent's next turns (~150 tokens each, at its
    pace) bring it there, as they would in use."""
    step = note * max(1, 150 // count(note))
    for k in range(12):
        with contextlib.suppress(AssertionError):
            return await wait_event(daemon, "model_budget", within=PACE_S)
        if link.context.tokens + count(step) > high - 400:  # the model's time would buy too little
            break
        await link.append(Section(f"turn-{k + 2}", "assistant", step, role="assistant", tokens=count(step)))
    return await wait_event(daemon, "model_budget", within=30)


@pytest.mark.slow
async def test_a_large_turn_while_the_model_works_cuts_the_model_off(
    default_daemon: DaemonProcess, trajectories: Path, model_path: str
) -> None:
    """The model works only until the context reaches the high watermark (the reserve is the
    agent's): a turn that reaches it while the model works gets the deterministic digest of the same
    region at once."""
    daemon = default_daemon
    await wait_event(daemon, "model_warmed", within=60)
    count = load_counter(model_path)
    traj = load(trajectories / "mini-swe-agent" / "pylint-dev__pylint-6528.traj.json", count=count)[0]
    async with AgentLink(daemon.endpoint, agent="late", budget=BUDGET) as link:
        high = link.high_watermark
        turns = iter(traj.turns)
        history: list[Section] = []
        for turn in turns:  # the history, in one append, to 2 000-2 500 tokens under the high mark
            if sum(s.tokens for s in history + turn) <= high - 2000:
                history += turn
            if sum(s.tokens for s in history) >= high - 2500:
                break
        await link.append(*history, wait=True)
        # one turn at an agent's pace, to 1 100 under the mark: a job starts (the look-ahead plans at
        # most 3/4 of the 2 400 between the watermarks early). What its time buys until the mark is
        # a scoring slice of several hundred tokens: enough for the model to rank lines of the
        # region (at 300 under the mark the slice was ~350 tokens, too few for any line of it)
        await asyncio.sleep(PACE_S)
        note = "The agent reads the failing test again and decides where the parser goes wrong. "
        prose = note * max(1, (high - 1100 - link.context.tokens) // count(note))
        await link.append(Section("turn-1", "assistant", prose, role="assistant", tokens=count(prose)))
        decided = await model_job_planned(daemon, link, note, count, high)
        assert decided["in_time"] and decided["limit"] == high, str(decided)  # never the reserve
        text = "Output line of a long build log with nothing new in it.\n" * 40
        lines = -(-(decided["limit"] - link.context.tokens) // count(text))
        big = Section("big-output", "tool_result", text * lines, role="tool", tokens=count(text * lines))
        await link.append(big, wait=True)  # reaches the model's limit while the model works
        assert link.context.tokens <= BUDGET
        late = await wait_event(daemon, "model_late", within=30)
        assert late["tokens"] >= late["limit"]
        p = await asyncio.wait_for(link.proposals.get(), 30)
        done = await wait_event(daemon, "digest_done", within=30)
        methods = (await status(daemon))["daemon"]["digest_methods"]
    assert done["used_model"] is False, done  # the job went on without the model
    # its digest shows the model's lines only where the model read them ahead, idle before the job
    # (watcher.serve.readahead): then it is the model's, and not a skip
    method = p.digest[0].meta["method"]
    assert method == done["method"] and (method == "deterministic" or done["ranked_ahead"] >= 1), done
    if method == "deterministic":
        assert methods["model_skipped"]["late"] == 1 and methods["model"] == 0, methods
    else:
        assert methods["model_skipped"]["late"] == 0 and methods["model"] == 1, methods
