"""Compaction jobs are served fairly: round-robin over agents, one slot per agent (latest wins), so a
chatty agent cannot starve the others and the queue never outgrows the number of agents."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from ipc.client import AgentLink
from ipc.sections import Section
from summarizer.digest import Item, Summarizer
from summarizer.engine import EngineSettings, LlamaEngine
from tests.fixtures.daemon import wait_until
from watcher.eval.harness import DaemonProcess
from watcher.serve.scheduler import MODEL_MAX_WAITING, FairScheduler, Job

pytestmark = pytest.mark.serial  # races the machine's own speed (tests/conftest.py)


async def test_chatty_agent_takes_turns_with_the_others() -> None:
    sched = FairScheduler()
    order: list[str] = []
    done = asyncio.Event()

    def job(key: str) -> Job:
        async def run() -> None:
            order.append(key)
            await asyncio.sleep(0.002)  # a job that yields, like a digest waiting for the model
            if len(order) >= 40:
                done.set()
                return
            sched.submit(key, job(key))  # every agent wants another turn once it had one
            if key == "chatty":
                for _ in range(50):  # ... and the chatty one asks again and again
                    sched.submit("chatty", job("chatty"))

        return run

    for key in ("chatty", "q1", "q2", "q3"):
        sched.submit(key, job(key))

    async def nag() -> None:  # the chatty agent also submits from outside, all the time
        while not done.is_set():
            sched.submit("chatty", job("chatty"))
            await asyncio.sleep(0)

    nagging = asyncio.create_task(nag())
    await asyncio.wait_for(done.wait(), 10)
    await nagging
    await sched.close()
    first = order[:40]
    assert first[:4] == ["chatty", "q1", "q2", "q3"], order
    # round-robin: every agent gets about a quarter of the turns, however often chatty asks
    assert first.count("chatty") <= 11 and all(first.count(q) >= 9 for q in ("q1", "q2", "q3")), order
    assert sched.max_depth <= 4 and sched.coalesced > 100


async def test_latest_job_wins_and_the_queue_stays_bounded() -> None:
    sched = FairScheduler()
    ran: list[tuple[str, int]] = []
    gate = asyncio.Event()

    entered = asyncio.Event()

    async def blocker() -> None:
        entered.set()
        await gate.wait()

    def job(key: str, n: int) -> Job:
        async def run() -> None:
            ran.append((key, n))

        return run

    sched.submit("busy", blocker)
    await asyncio.wait_for(entered.wait(), 5)  # the worker is now inside blocker: everything else waits
    for n in range(1000):
        for key in ("a", "b", "c"):
            sched.submit(key, job(key, n))
    assert sched.depth == 3 and sched.max_depth == 3
    assert sched.coalesced == 3 * 999
    gate.set()
    await wait_until(lambda: len(ran) == 3, 1, "the three latest jobs ran")
    assert ran == [("a", 999), ("b", 999), ("c", 999)]
    await sched.close()


async def test_a_failing_job_does_not_stop_the_others() -> None:
    sched = FairScheduler()
    ran: list[str] = []

    async def bad() -> None:
        raise RuntimeError("boom")

    async def good() -> None:
        ran.append("good")

    sched.submit("bad", bad)
    sched.submit("good", good)
    await wait_until(lambda: ran, 1, "the good job ran")
    assert ran == ["good"] and sched.failed == 1
    await sched.close()


@pytest.mark.slow
async def test_every_agent_gets_proposals_while_one_floods(tmp_path: Path) -> None:
    """A real daemon (no model): a chatty agent streams deltas as fast as it can while quiet agents
    cross their watermark; each quiet agent still gets its proposal and the queue stays small."""
    proc = DaemonProcess(tmp_path, None, model=False)
    await proc.wait_ready(30)
    stop = asyncio.Event()
    try:
        async with AgentLink(proc.endpoint, agent="chatty", budget=4000, timeout_s=10) as chatty:

            async def flood() -> None:
                i = 0
                while not stop.is_set():
                    text = f"log line {i} " * 40
                    await chatty.append(
                        Section(f"c{i}", "tool_result", text, tokens=len(text) // 3), wait=True
                    )
                    i += 1
                    while not chatty.proposals.empty():
                        await chatty.apply(chatty.proposals.get_nowait())

            flooding = asyncio.create_task(flood())
            quiet = [
                AgentLink(proc.endpoint, agent=f"quiet-{i}", budget=4000, timeout_s=10) for i in range(6)
            ]
            for link in quiet:
                await link.connect()
            got: dict[str, int] = {}
            for round_ in range(3):
                for link in quiet:  # each quiet agent crosses its high watermark once per round
                    while link.context.tokens < link.high_watermark:
                        n = len(link.context)
                        sec = Section(f"r{round_}-{n}", "tool_result", f"x = {n}\n" * 120, tokens=240)
                        await link.append(sec, wait=True)
                for link in quiet:
                    p = await asyncio.wait_for(link.proposals.get(), 60)
                    assert await link.apply(p)
                    got[link.agent] = got.get(link.agent, 0) + 1
            status = await chatty.status()
            stop.set()
            await flooding
            for link in quiet:
                await link.close()
        assert got == {f"quiet-{i}": 3 for i in range(6)}
        queue = status["daemon"]["compaction_queue"]
        assert queue["max_depth"] <= 7, queue
        assert queue["served"] >= 18
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            proc.stop()


async def test_the_model_lane_holds_one_job_and_only_while_the_queue_is_short(model_path: str) -> None:
    """A job gets the model only if the lane is free and few agents wait; the others digest
    deterministically (the same token counts) beside it, off the event loop."""
    engine = LlamaEngine(EngineSettings(model_path))
    try:
        summarizer = Summarizer(engine)
        sched = FairScheduler()
        picked: dict[str, Summarizer] = {}
        release = asyncio.Event()
        ran: list[str] = []

        def job(key: str, hold: bool = False) -> Job:
            async def run() -> None:
                picked[key] = sched.pick(summarizer)
                ran.append(key)
                if hold:
                    await release.wait()  # a long gist

            return run

        sched.submit("first", job("first", hold=True))
        await wait_until(lambda: "first" in picked, 5, "the first job started")
        assert picked["first"] is summarizer, "an idle scheduler gives the model to the first job"
        for i in range(MODEL_MAX_WAITING + 3):
            sched.submit(f"w{i}", job(f"w{i}"))
        await wait_until(lambda: len(ran) == MODEL_MAX_WAITING + 4, 1, "every job ran")
        # all the others ran beside the model job, without the model
        assert ran[0] == "first" and len(ran) == MODEL_MAX_WAITING + 4, ran
        assert all(picked[k].engine is None for k in ran[1:])
        assert sched.stats()["model_busy"] and sched.model_skipped == MODEL_MAX_WAITING + 3
        release.set()
        await wait_until(lambda: not sched.stats()["model_busy"], 5, "the long gist is done")
        sched.submit("later", job("later"))  # the lane is free and the queue short again
        await wait_until(lambda: "later" in picked, 1, "the later job ran")
        assert picked["later"] is summarizer and sched.model_jobs == 2

        fast = picked["w0"]
        text = "The parser drops the last field when a line ends with a tab; I will keep it. " * 6
        assert fast.count(text) == summarizer.count(text)
        items = [Item(f"s{i}", "assistant", text, summarizer.count(text)) for i in range(4)]
        digest = await fast.digest(items, "a1", 120)  # on a worker thread
        assert digest.method == "deterministic" and digest.tokens < digest.tokens_before
        await sched.close()
    finally:
        engine.close()


async def test_the_lane_is_chosen_when_the_job_starts_before_its_first_await() -> None:
    """The model lane goes to the first job as it starts (no loop turn decides it), not to
    whichever job asks first; a job that gives it back (its digest must be sooner) frees it."""
    sched = FairScheduler()
    lanes: dict[str, bool] = {}  # job -> did it hold the model lane before its first await?
    started = {k: asyncio.Event() for k in ("a", "b", "c")}
    gate = asyncio.Event()

    def job(key: str, give_back: bool = False) -> Job:
        async def run() -> None:
            lanes[key] = sched.holds_model()
            if give_back:
                sched.deterministic(Summarizer(None))
            started[key].set()
            await gate.wait()

        return run

    sched.submit("a", job("a", give_back=True))
    sched.submit("b", job("b"))
    await asyncio.wait_for(asyncio.gather(started["a"].wait(), started["b"].wait()), 5)
    assert lanes == {"a": True, "b": False}, "the first job got the lane when it started; b did not"
    assert not sched.stats()["model_busy"], "a gave it back"
    sched.submit("c", job("c"))
    gate.set()
    await asyncio.wait_for(started["c"].wait(), 5)
    assert lanes["c"] is True, "the free lane goes to the next job that starts"
    await sched.close()


async def test_without_a_model_no_job_holds_the_model_lane() -> None:
    sched = FairScheduler(has_model=lambda: False)
    held: list[bool] = []
    done = asyncio.Event()

    async def run() -> None:
        held.append(sched.holds_model())
        done.set()

    sched.submit("a", run)
    await asyncio.wait_for(done.wait(), 5)
    assert held == [False] and sched.model_jobs == 0
    await sched.close()


async def test_a_job_the_lane_was_busy_for_waits_for_it_and_goes_before_new_jobs() -> None:
    """A job that started while another held the model lane waits for it (wait_model): it gets the
    lane when the holder ends, before a job that starts meanwhile; a second job cannot wait beside
    it (False at once)."""
    sched = FairScheduler()
    gates = {k: asyncio.Event() for k in ("holder", "heir", "other", "late")}
    ready = {k: asyncio.Event() for k in gates}  # the job knows its lane
    lane: dict[str, bool] = {}

    def job(key: str, wait: float | None = None) -> Job:
        async def run() -> None:
            lane[key] = sched.holds_model()
            if wait is not None:
                lane[key] = await sched.wait_model(wait)
            ready[key].set()
            await gates[key].wait()

        return run

    sched.submit("holder", job("holder"))
    await asyncio.wait_for(ready["holder"].wait(), 5)
    sched.submit("heir", job("heir", wait=5.0))
    await wait_until(lambda: sched.lane_waits == 1, 5, "the heir waits")
    sched.submit("other", job("other", wait=5.0))
    await asyncio.wait_for(ready["other"].wait(), 5)
    assert lane == {"holder": True, "heir": False, "other": False} and sched.lane_waits == 1
    gates["other"].set()
    gates["holder"].set()  # the holder ends: the lane goes to the job waiting for it
    await asyncio.wait_for(ready["heir"].wait(), 5)
    assert lane["heir"] is True and sched.model_busy and sched.lane_waits_won == 1
    sched.submit("late", job("late"))  # a job that starts now finds the lane held by the heir
    await asyncio.wait_for(ready["late"].wait(), 5)
    assert lane["late"] is False
    gates["heir"].set()
    gates["late"].set()
    await wait_until(lambda: not sched.running, 5, "all ended")
    assert not sched.model_busy
    await sched.close()


async def test_a_wait_for_the_lane_that_runs_out_or_is_called_off_ends_without_it() -> None:
    """A wait ends without the lane when its time runs out, or when its ``until`` event is set (the
    agent's context reached the model's limit meanwhile); the lane stays free for the next job."""
    sched = FairScheduler()
    gate, held, off = asyncio.Event(), asyncio.Event(), asyncio.Event()
    result: list[bool] = []

    async def holder() -> None:
        held.set()
        await gate.wait()

    async def heir() -> None:
        result.append(await sched.wait_model(0.2))

    async def called_off() -> None:
        result.append(await sched.wait_model(30.0, off))

    async def later() -> None:
        result.append(sched.holds_model())

    sched.submit("holder", holder)
    await asyncio.wait_for(held.wait(), 5)
    sched.submit("heir", heir)
    await wait_until(lambda: bool(result), 5, "the wait runs out")
    assert result == [False] and sched.model_busy and sched.lane_waits_won == 0
    sched.submit("off", called_off)
    await wait_until(lambda: sched.lane_waits == 2, 5, "the second wait")
    off.set()
    await wait_until(lambda: len(result) == 2, 5, "the wait called off")
    assert result == [False, False] and sched.model_busy
    gate.set()
    await wait_until(lambda: not sched.running, 5, "the holder ends")
    assert not sched.model_busy, "nobody waits for it now: the lane is free"
    sched.submit("later", later)
    await wait_until(lambda: len(result) == 3, 5, "the next job")
    assert result == [False, False, True]
    await sched.close()


async def test_the_wait_for_the_lane_ends_when_the_queue_grows() -> None:
    """While a job waits for the model lane, more than MODEL_MAX_WAITING jobs joining the queue end
    its wait without the lane (the lane's own rule: a queue of agents never waits for the model)."""
    sched = FairScheduler()
    gate = asyncio.Event()
    result: list[bool] = []
    held = asyncio.Event()

    async def holder() -> None:
        held.set()
        await gate.wait()

    async def heir() -> None:
        result.append(await sched.wait_model(30.0))

    sched.submit("holder", holder)
    await asyncio.wait_for(held.wait(), 5)
    sched.submit("heir", heir)
    await wait_until(lambda: sched.lane_waits == 1, 5, "the heir waits")
    # both deterministic lanes are taken (the heir's and a blocked job's): the others queue
    sched.submit("busy", gate.wait)
    for k in range(MODEL_MAX_WAITING + 1):
        sched.submit(f"q{k}", gate.wait)
    await wait_until(lambda: bool(result), 5, "the heir gives up")
    assert result == [False] and sched.model_busy  # the holder still has it
    gate.set()
    await wait_until(lambda: not sched.running and not sched.depth, 5, "all ended")
    await sched.close()
