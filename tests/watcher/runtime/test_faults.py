"""Model faults on a real daemon with the real model: inference that times out, a model file that is
missing or corrupt at start. The daemon stays up, keeps compacting deterministically, reports itself
degraded, and recovers once the model is fixed and the configuration reloaded (SIGHUP)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from ipc.client import AgentLink
from ipc.protocol import Proposal
from ipc.sections import Section
from tests.fixtures.daemon import log_events, wait_event
from watcher.eval.harness import DaemonProcess

BUDGET = 2000
# one inference thread: two llama.cpp threads spin-wait on each other when the machine is busy
# the test feeds turns back to back: look-ahead would (rightly) judge that no model gist can be
# ready in time and digest deterministically, so it never reaches the model this test is about
MODEL = (  # a gist (off by default) is a model call whatever the region holds: the timeout is hit
    '[model]\npath = "{path}"\nn_threads = 1\ntimeout_s = {timeout}\ngists = true\n'
    "[compaction]\nlookahead = false\n"
)

PROSE = (
    "I read {f} and the failing test. The parser drops the last field when a line ends with a "
    "tab, so the row count is off by one. I will keep that field and add a test. Step {i} is done."
)


def prose(i: int) -> Section:
    text = PROSE.format(f=f"src/reader_{i}.py", i=i)
    return Section(f"p{i}", "assistant" if i % 2 else "user", text, tokens=len(text) // 3)


async def compact_once(link: AgentLink, start: int) -> tuple[Proposal, int]:
    """Grow the context past the high watermark with prose; apply the proposal that follows."""
    i = start
    while link.context.tokens < link.high_watermark:
        await link.append(prose(i), wait=True)
        i += 1
    p = await asyncio.wait_for(link.proposals.get(), 90)
    assert await link.apply(p)
    return p, i


async def daemon_state(link: AgentLink) -> dict[str, Any]:
    state: dict[str, Any] = (await link.status())["daemon"]
    return state


@pytest.mark.slow
async def test_inference_timeout_degrades_then_recovers_on_reload(tmp_path: Path, model_path: str) -> None:
    cfg = tmp_path / "compactd.toml"
    cfg.write_text(MODEL.format(path=model_path, timeout=0.001))
    daemon = DaemonProcess(tmp_path, str(cfg), model=True)
    try:
        await daemon.wait_ready(120)
        async with AgentLink(daemon.endpoint, agent="faulty", budget=BUDGET, timeout_s=30) as link:
            p, _ = await compact_once(link, 0)
            assert p.digest[0].meta["method"] == "deterministic"
            assert p.tokens_after < p.tokens_before
            st = await daemon_state(link)
            assert st["degraded"] is True and "GenerationTimeout" in st["degraded_reason"], st
            assert log_events(daemon, "degraded")

            cfg.write_text(MODEL.format(path=model_path, timeout=60))
            daemon.proc.send_signal(signal.SIGHUP)
            await wait_event(daemon, "reloaded")
            st = await daemon_state(link)
            assert st["degraded"] is False, st
            await wait_event(daemon, "recovered")

        # a fresh agent with a small budget: its region is small, so its gist is quick
        async with AgentLink(daemon.endpoint, agent="healthy", budget=1000, timeout_s=30) as link:
            p, _ = await compact_once(link, 0)
            st = await daemon_state(link)
            assert st["degraded"] is False, st["degraded_reason"]  # the model ran without failing
            assert p.tokens_after < p.tokens_before
            assert daemon.proc.poll() is None
    finally:
        assert daemon.stop() == 0


async def test_corrupt_model_at_start_serves_degraded_until_fixed(tmp_path: Path, model_path: str) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + b"\x00" * 64)  # the right magic, nothing usable behind it
    cfg = tmp_path / "compactd.toml"
    cfg.write_text(f'[model]\npath = "{model}"\n')
    daemon = DaemonProcess(tmp_path, str(cfg), model=True)
    try:
        await daemon.wait_ready(60)
        assert log_events(daemon, "model_unavailable")
        async with AgentLink(daemon.endpoint, agent="patient", budget=BUDGET, timeout_s=30) as link:
            st = await daemon_state(link)
            assert st["degraded"] is True and "model unavailable" in st["degraded_reason"], st
            p, _ = await compact_once(link, 0)  # deterministic compaction carries on
            assert p.digest[0].meta["method"] == "deterministic"

            daemon.proc.send_signal(signal.SIGHUP)  # still corrupt: stays degraded, keeps serving
            await wait_event(daemon, "model_unavailable", 2)
            await wait_event(daemon, "reloaded")
            assert (await daemon_state(link))["degraded"] is True

            model.unlink()
            model.symlink_to(model_path)  # the operator puts a good model in place
            daemon.proc.send_signal(signal.SIGHUP)
            await wait_event(daemon, "reloaded", 2, within=120)
            st = await daemon_state(link)
            assert st["degraded"] is False, st
            await wait_event(daemon, "recovered")
    finally:
        assert daemon.stop() == 0
