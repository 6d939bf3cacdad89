"""A compaction job that finds the model lane taken waits for it when its agent's pace leaves time
(watcher.serve.jobs, ``Jobs.wait_for_lane``): a real Server in the test's loop, the real model,
one real AgentLink. Another job holds the model lane; the agent crosses its trigger; its job waits,
gets the lane when the holder ends, and digests with the model.

The time a job may wait is what its agent's pace leaves beyond its own model job. The look-ahead
plans a model job's lead from the *typical* job's expected time, so a job that reads less than the
typical one has time to spare: here the typical job is set to read what the model reads in
TYPICAL_S at the rate the warm-up measured; the agent's region holds ~2 000 tokens for the model
to read, half of TYPICAL_S at 200 tokens/s (170-400 on the 2-core machines this runs on), so its
job has seconds to wait. A slower machine (CI once measured 100 tokens/s, where that job's own time
was the whole lead and it waited a fraction of a second) stretches the test's clock: the typical
job's seconds and the agent's pace grow by the same factor, so the lead in tokens (seconds x pace)
and the contexts' sizes stay as they are, and the job's own time is again half the lead."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
import zmq.asyncio

from ipc.client import AgentLink
from ipc.sections import Section
from summarizer.digest import Summarizer
from summarizer.engine import EngineSettings, LlamaEngine
from summarizer.tokenizer import load_counter
from tests.fixtures.daemon import wait_until
from tests.fixtures.server import serving
from watcher.config.settings import Config
from watcher.serve.modelcost import engine_totals, warm_up
from watcher.serve.server import Server

pytestmark = pytest.mark.serial  # races the machine's own speed (tests/conftest.py)

BUDGET = 16000  # high watermark 13 600, low 11 200 (reserve 0.15, low 0.7)
TURN_S = 2.0  # the agent's pace
TYPICAL_S = 20.0  # seconds of the typical model job: the look-ahead's lead, ~1 000 tokens at 100 a turn
REGION_TOKENS = 2000  # about what the agent's job gives the model to read


def _stretch(rate: float) -> float:
    """The factor on the test's clock at a measured prefill rate: 1 where the agent's job reads its
    region in at most half of TYPICAL_S, more on a slower machine (see the module's doc)."""
    return max(1.0, 2 * REGION_TOKENS / (rate * TYPICAL_S))


def _output(k: int, lines: int) -> str:
    out = [f"[{k}.{i:03d}] test_module_{k}::test_case_{i} PASSED ({i % 7}.{k}s)" for i in range(lines)]
    out[lines // 2] = f"[{k}.{lines // 2:03d}] test_module_{k}::test_edge FAILED: expected 4{k}, got 5{k}"
    return "\n".join(out)


def _turn(k: int, lines: int, count: Callable[[str], int]) -> list[Section]:
    call, out, g = f"pytest tests/test_module_{k}.py", _output(k, lines), f"t{k}"
    return [
        Section(f"c{k}", "tool_call", call, role="assistant", tokens=count(call), group=g),
        Section(f"r{k}", "tool_result", out, role="tool", tokens=count(out), group=g),
    ]


@pytest.mark.slow
async def test_a_job_waits_for_the_busy_model_lane_and_gets_it(tmp_path: Path, model_path: str) -> None:
    engine = LlamaEngine(EngineSettings(model_path))
    count = load_counter(model_path)

    def make(sock: zmq.asyncio.Socket) -> Server:
        return Server(sock, Config(), Summarizer(engine))

    release = asyncio.Event()
    try:
        async with serving(tmp_path, make) as served:
            server, sched = served.server, served.server.scheduler
            await warm_up(server.summarizer, server.jobs.cost)  # the model's cost measured: a wait is sized
            cost = server.jobs.cost
            assert cost.measured
            stretch = _stretch(cost.rate)  # see the module's doc
            typical = int(cost.rate * TYPICAL_S * stretch)
            cost.warmed(typical, typical / cost.rate, engine_totals(engine.stats()))
            sched.submit("holder", release.wait)  # another job holds the model lane until released
            await wait_until(lambda: sched.model_busy, 5, "the holder takes the model lane")
            async with AgentLink(served.endpoint, agent="b", budget=BUDGET, zmq_context=served.ctx) as link:
                # the history at once (the start, not a turn), then small turns at the agent's pace
                await link.append(*[s for k in range(13) for s in _turn(k, 30, count)], wait=True)
                assert link.context.tokens < link.high_watermark - 1300  # under the trigger
                k = 13
                while not sched.lane_waits:
                    assert link.context.tokens < link.high_watermark, "no job waited for the lane"
                    await asyncio.sleep(TURN_S * stretch)
                    await link.append(*_turn(k, 3, count), wait=True)
                    k += 1
                    await asyncio.sleep(0.3)  # the job, if one started, is at the lane
                assert sched.lane_waits_won == 0  # still waiting: the holder has the lane
                release.set()  # the holder ends: the lane goes to the waiting job
                proposal = await asyncio.wait_for(link.proposals.get(), 60)
                assert await link.apply(proposal)
            stats = sched.stats()
            assert stats["lane_waits"] == 1 and stats["lane_waits_won"] == 1, stats
            methods = server.jobs.degrader.methods  # STATUS daemon.digest_methods
            assert methods.skipped["busy"] == 0, methods.skipped  # it did not go without the model
            assert methods.methods["model"] + methods.skipped["not_shown"] == 1, (
                methods.methods,
                methods.skipped,
            )
    finally:
        release.set()
        engine.close()
