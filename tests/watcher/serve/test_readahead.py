"""The model reads ahead (watcher.serve.readahead): a real daemon with the real model, idle, ranks the
lines of an agent's foldable sections once each (not its anchors, not its freshest turns, not what is
too small to rank), and the digest of a region holding them ranks them from those reads."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import zmq.asyncio

from ipc.client import AgentLink
from ipc.sections import Section, text_key
from summarizer.digest import Summarizer
from summarizer.engine import EngineSettings, LlamaEngine
from summarizer.tokenizer import load_counter
from tests.fixtures.daemon import log_events, status, wait_event, wait_until
from tests.fixtures.server import serving
from watcher.config.settings import Config
from watcher.eval.harness import DaemonProcess, running_daemon
from watcher.serve.readahead import READ_QUIET_S
from watcher.serve.server import Server

pytestmark = pytest.mark.serial  # races the machine's own speed (tests/conftest.py)

BUDGET = 16000  # high watermark 13 600 (reserve 0.15): reading starts at half the trigger
FRESH = 4  # [compaction] fresh_turns, the default


def _output(turn: int) -> str:
    """A tool output of ~850 tokens: a build log with one odd line."""
    lines = [f"[{turn}.{k:03d}] compiling crate_{turn}_{k} v0.{k}.{turn} (debug) ok" for k in range(32)]
    lines[17] = f"[{turn}.017] warning: checksum 9f{turn}e1c7 of vendor/zlib-{turn} differs from Cargo.lock"
    return "\n".join(lines)


def _turn(k: int, count: Any) -> list[Section]:
    call = f"cargo build -p crate_{k}"
    out = _output(k)
    g = f"t{k}"
    return [
        Section(f"c{k}", "tool_call", call, role="assistant", tokens=count(call), group=g),
        Section(f"r{k}", "tool_result", out, role="tool", tokens=count(out), group=g),
    ]


async def _read(daemon: DaemonProcess) -> dict[str, Any]:
    data = await status(daemon)
    return dict(data["daemon"]["read_ahead"])


async def test_an_idle_model_reads_foldable_sections_ahead_once_each(tmp_path: Path, model_path: str) -> None:
    count = load_counter(model_path)
    async with running_daemon(tmp_path, None, model=True) as daemon:
        await wait_event(daemon, "model_warmed", within=60)
        async with AgentLink(daemon.endpoint, agent="reader", budget=BUDGET) as link:
            system = "You are a careful coding agent. " * 20  # an anchor, never folded: never read
            sections = [Section("sys", "system", system, role="system", tokens=count(system))]
            for k in range(9):  # ~7 800 tokens: above half the trigger, under it
                sections += _turn(k, count)
            assert BUDGET * 0.4 < sum(s.tokens for s in sections) < BUDGET * 0.7
            await link.append(*sections, wait=True)
            foldable = 9 - FRESH  # the tool outputs of the turns before the freshest four
            got = await wait_until(
                lambda: _when(_read(daemon), lambda r: r["sections"] >= foldable), 60, "the reads"
            )
            await asyncio.sleep(2.0)  # nothing else is left to read: the count stays
            got = await _read(daemon)
            assert got["sections"] == foldable and got["failed"] == 0, got
            assert got["tokens"] == sum(
                s.tokens for s in sections if s.id in {f"r{k}" for k in range(foldable)}
            )
            # two more turns: two more outputs leave the freshest four, and are read
            await link.append(*_turn(9, count), *_turn(10, count), wait=True)
            await wait_until(
                lambda: _when(_read(daemon), lambda r: r["sections"] >= foldable + 2), 60, "two more reads"
            )
            # over the trigger: the digest ranks what was read, from the reads
            while link.context.tokens < link.high_watermark - 200:
                k = len(link.context) // 2
                await link.append(*_turn(k, count), wait=True)
            proposal = await asyncio.wait_for(link.proposals.get(), 60)
            assert await link.apply(proposal)
        done = await wait_event(daemon, "digest_done", within=30)
        assert done["ranked_ahead"] >= 1, done
        if done["used_model"] and done["method"] != "model":  # ranked (ahead), nothing new shown
            assert done["model_skipped"] == "not_shown", done
        got = await _read(daemon)
        assert got["digests"] >= 1 and got["failed"] == 0, got
    # the daemon's last lines say what the model did over its life
    (stopping,) = log_events(daemon, "stopping")
    assert stopping["read_ahead"]["sections"] >= foldable + 2, stopping
    assert stopping["digest_methods"]["model"] + stopping["digest_methods"]["deterministic"] >= 1, stopping
    assert stopping["compaction_queue"]["served"] >= 1, stopping


async def _when(got: Any, ok: Any) -> Any:
    value = await got
    return value if ok(value) else None


async def test_reading_waits_for_a_quiet_queue(tmp_path: Path, model_path: str) -> None:
    """The model reads only once the compaction queue has been quiet for READ_QUIET_S: no job
    submitted, waiting or holding the model lane meanwhile (a daemon compacting for many agents
    leaves its cores to them); `read_ahead_tokens = 0` turns reading off."""
    engine = LlamaEngine(EngineSettings(model_path))

    def make(sock: zmq.asyncio.Socket) -> Server:
        return Server(sock, Config(), Summarizer(engine))

    try:
        async with serving(tmp_path, make) as served:
            server = served.server
            reader, sched = server.read_ahead, server.scheduler
            await asyncio.sleep(READ_QUIET_S + 0.3)
            assert reader.may_read(time.monotonic())
            release = asyncio.Event()
            sched.submit("a", release.wait)  # a job that holds the model lane until released
            assert not reader.may_read(time.monotonic())
            await asyncio.sleep(READ_QUIET_S + 0.3)
            assert sched.model_busy and not reader.may_read(time.monotonic())
            release.set()
            await wait_until(lambda: not sched.running, 5, "the job ends")
            assert not reader.may_read(time.monotonic())  # busy until a moment ago
            await asyncio.sleep(READ_QUIET_S + 0.3)
            assert reader.may_read(time.monotonic())
            server.apply_config(replace(server.cfg, model=replace(server.cfg.model, read_ahead_tokens=0)))
            assert not reader.may_read(time.monotonic())
    finally:
        engine.close()


async def test_reads_are_spread_over_the_next_regions_largest_section_first(tmp_path: Path) -> None:
    """Each read goes to the agent (of those nearest their high watermark) whose next region holds
    the fewest sections read, nearest first on a tie, and there to the largest unread section;
    past the next region, the oldest. A fresh section too large to stay is read too. (The reader's
    choice only: no model is needed.)"""

    def make(sock: zmq.asyncio.Socket) -> Server:
        return Server(sock, Config(), Summarizer(None))

    def turn(agent: str, k: int, size: int) -> list[Section]:
        out = "\n".join(f"{agent} line {k}.{i} " + "x" * 30 for i in range(size // 12))
        g = f"{agent}{k}"
        return [
            Section(f"{g}c", "tool_call", f"run {k}", role="assistant", tokens=4, group=g),
            Section(f"{g}r", "tool_result", out, role="tool", tokens=size, group=g),
        ]

    budget = 20000  # high 17 000, low 14 000: a next region of the oldest ~3 600 tokens
    # near: 13 636 tokens (0.80 of high), far: 10 532 (0.62), both under the trigger; the freshest four
    # turns are not foldable (never read), but for far's first: 1 600 tokens, too large to stay
    # (over half the gap between the watermarks), the planner may fold it
    near_sizes = [900, 2000, 700, 3000, 3000] + [1000] * FRESH
    far_sizes = [1500, 600, 800, 3000, 1600] + [1000] * (FRESH - 1)
    async with serving(tmp_path, make) as served:
        reader = served.server.read_ahead
        async with (
            AgentLink(served.endpoint, agent="near", budget=budget, zmq_context=served.ctx) as near,
            AgentLink(served.endpoint, agent="far", budget=budget, zmq_context=served.ctx) as far,
        ):
            for link, sizes in ((near, near_sizes), (far, far_sizes)):
                turns = [s for k, n in enumerate(sizes) for s in turn(link.agent, k, n)]
                await link.append(*turns, wait=True)
            picks: list[str] = []
            for _ in range(10):
                picked = reader.next_section()
                assert picked is not None
                state, section = picked
                picks.append(section.id)
                state.ranks[section.id] = (text_key(section), ())  # as a read would leave it
            assert reader.next_section() is None  # all foldable sections are read
    assert picks == [
        "near1r",  # near's next region is its r0, r1, r2 (the one that crosses 3 600 tokens is in)
        "far3r",  # far has none read in its next region, r0 to r3: its largest
        "near0r",  # a tie (one read each): the nearest; its next largest
        "far0r",
        "near2r",
        "far2r",  # near's next region is read whole: far's goes first
        "far1r",
        "near3r",  # both next regions read whole: past them, the oldest unread
        "near4r",
        "far4r",  # fresh, but too large to stay
    ]
