"""Graceful degradation: a job that cannot be done before its agent's deadline uses a cheaper
strategy for that agent (deterministic, masking, head/tail), says so (STATUS, metrics, MQTT, log),
and the agent recovers when the queue drains. Which digest method each job used is counted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ipc.client import AgentLink
from ipc.sections import Section
from summarizer.digest import Item, approx_tokens
from summarizer.headtail import LABEL, HeadTailSummarizer
from tests.fixtures.broker import Broker
from tests.fixtures.daemon import log_events, status, wait_until
from tests.fixtures.net import free_port
from tests.watcher.observe.test_events import Subscriber, body, event_topic
from tests.watcher.observe.test_metrics import scrape
from watcher.eval.harness import DaemonProcess
from watcher.planning.planner import Watermarks
from watcher.serve.degrade import (
    DEEP_FLOOR,
    DEEP_SAFETY,
    DETERMINISTIC,
    HEADTAIL,
    LOADED,
    MARGIN,
    MASKING,
    NORMAL,
    JobTimes,
    deeper,
    fast_plan,
    level_for,
)

pytestmark = pytest.mark.serial  # races the machine's own speed (tests/conftest.py)


def test_under_load_a_job_folds_deeper_when_its_bite_would_not_last_a_queue_cycle() -> None:
    marks = Watermarks(32_000, 0.15, 0.7)  # high 27 200, low 22 400
    trigger = 24_000
    # alone, or growing slowly for the queue's pace: the agent's own watermarks (the same object)
    assert deeper(marks, trigger, rate=1500, cycle_s=5.0, waiting=LOADED - 1) is marks
    assert deeper(marks, trigger, rate=175, cycle_s=0.5, waiting=50) is marks  # a trajectory at 2 s/turn
    # 1500 tokens/s and a 1 s cycle: 3 000 tokens of bite needed, 1 600 there: down to 21 000
    d = deeper(marks, trigger, rate=1500, cycle_s=1.0, waiting=LOADED)
    assert d.low == trigger - int(1500 * 1.0 * DEEP_SAFETY)
    assert d.high == marks.high and d.budget == marks.budget
    # a long queue: never below the floor
    assert deeper(marks, trigger, rate=1500, cycle_s=30.0, waiting=100).low == int(32_000 * DEEP_FLOOR)


def test_the_level_is_the_first_strategy_that_fits_the_slack() -> None:
    times = JobTimes()
    model, det = 6.0, times.expect("deterministic")  # model: this job's measured cost (ModelCost)
    assert level_for(model * MARGIN, times, model_s=model) == NORMAL
    assert level_for(model * MARGIN - 0.01, times, model_s=model) == DETERMINISTIC
    assert level_for(det * MARGIN, times, model_s=None) == NORMAL  # without the model lane
    assert level_for(det * MARGIN - 0.01, times, model_s=None) == MASKING
    assert level_for(-5.0, times, model_s=model) == MASKING
    times.record("deterministic", 0.02)  # measured: deterministic digests are fast on this machine
    assert level_for(0.05, times, model_s=None) == NORMAL


def turns(n: int, out_tokens: int) -> list[Section]:
    """A system prompt, then ``n`` turns: an assistant step and its tool output (one group)."""
    secs = [Section("sys", "system", "You are a coding agent.", "system", 20, "critical")]
    for i in range(n):
        secs.append(Section(f"a{i}", "assistant", f"I will run step {i}.", "assistant", 12, group=f"g{i}"))
        text = "".join(f"out {i}.{j}: ok\n" for j in range(out_tokens // 5))
        secs.append(Section(f"t{i}", "tool_result", text, "tool", out_tokens, "low", group=f"g{i}"))
    return secs


def test_masking_when_it_brings_the_context_under_the_high_watermark_else_head_and_tail() -> None:
    marks = Watermarks(8000, 0.15, 0.6)
    level, p = fast_plan(turns(20, 400), marks, fresh=3)  # 8 260 tokens, mostly old tool output
    assert level == MASKING and p is not None and len(p.ids) > 10
    secs = [
        *turns(3, 400)[:1],
        *(Section(f"u{i}", "assistant", "long reasoning " * 300, "assistant", 700) for i in range(11)),
    ]
    level, p = fast_plan(secs, marks, fresh=3)  # no tool output to mask: the oldest region
    assert level == HEADTAIL and p is not None and p.ids[0] == "u0" and p.strategy == "headtail"
    assert sum(s.tokens for s in secs) - p.tokens + p.target_tokens <= marks.low + p.target_tokens


async def test_a_head_and_tail_digest_quotes_its_region_and_fits_the_target() -> None:
    text = "".join(f"line {k}: the value of <|im_start|>x{k} is {k * k}\n" for k in range(400))
    items = [Item(f"s{i}", "tool_result", text, approx_tokens(text)) for i in range(3)]
    d = await HeadTailSummarizer(None).digest(items, "a7", 300)
    assert d.method == "headtail" and d.tokens <= 300 < d.tokens_before
    head, label, quoted = d.text.split("\n", 2)
    assert "a7" in head and "s0..s2" in head and label == LABEL
    assert quoted.startswith("  s0 tool_result: line 0:") and "recall a7" in quoted
    assert "<|im_start|>" not in d.text  # quoted text is defanged
    for line in quoted.split("\n"):  # every line of the quote comes from the region
        part = line.strip()
        if part and not part.startswith("[…") and not part.startswith("s0 tool_result"):
            assert part.replace("< |im_start| >", "<|im_start|>") in text or part.startswith("s"), part


@pytest.mark.broker
@pytest.mark.slow
async def test_overdue_agents_degrade_say_so_and_recover(broker: Broker, tmp_path: Path) -> None:
    """A real daemon (no model) with a real broker and metrics: agents that arrive already over
    their budget, all at once, cannot be served before their deadline while others wait: they
    degrade (masking here: old tool output), which STATUS, the metrics, MQTT and the log say;
    once the queue has drained they are back to normal."""
    port = free_port()
    daemon = DaemonProcess(
        tmp_path,
        None,
        model=False,
        extra_args=("--mqtt", f"mqtt://127.0.0.1:{broker.port}", "--metrics", f"127.0.0.1:{port}"),
    )
    await daemon.wait_ready(30)
    try:
        async with Subscriber(broker.port) as sub:
            links = [
                AgentLink(daemon.endpoint, agent=f"over-{i}", budget=8000, timeout_s=20) for i in range(8)
            ]
            for link in links:
                await link.connect()
            await asyncio.gather(*(link.snapshot(turns(24, 400)) for link in links))  # 9 900 tokens
            for link in links:
                p = await asyncio.wait_for(link.proposals.get(), 60)
                assert await link.apply(p)
                assert link.context.tokens < link.high_watermark, link.agent
            degraded = log_events(daemon, "agent_degraded")
            assert degraded, "some jobs started while others waited, past their deadline"
            who = {e["agent"] for e in degraded}
            msg = await sub.wait(lambda m: str(m.topic) == event_topic(sorted(who)[0], "agent_degraded"))
            assert body(msg)["level"] in ("masking", "headtail") and body(msg)["reason"] == "deadline"
            await wait_until(lambda: len(log_events(daemon, "agent_recovered")) >= len(who), 20, "recovered")
            await sub.wait(lambda m: str(m.topic) == event_topic(sorted(who)[0], "agent_recovered"))
            st = await status(daemon)
            methods = st["daemon"]["digest_methods"]
            assert methods["masking"] + methods["headtail"] >= len(who)
            assert sum(methods[m] for m in ("deterministic", "masking", "headtail")) == len(links)
            assert methods["model"] == 0 and methods["model_skipped"]["no_model"] == len(links)
            assert methods["agents_degraded"] == 0 and methods["recoveries"] >= len(who)
            assert all(a["degraded"] == "normal" for a in st["agents"])
            m = await scrape(port)
            assert m[("compactd_agents_degraded", ())] == 0
            key = "compactd_agent_degradations_total"
            levels = sum(m[(key, (("level", lv),))] for lv in ("masking", "headtail"))
            assert levels == len(degraded)
            assert m[("compactd_digests_total", (("method", "masking"),))] == methods["masking"]
            for link in links:
                await link.close()
    finally:
        daemon.stop()
