"""Deterministic digests in a worker process without a tokenizer: counted with the model's tokenizer
when they come back, fitted again when the worker's estimate was far off, survive a dead worker,
and never outlive a daemon killed with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from ipc.client import AgentLink
from ipc.sections import Section
from summarizer.digest import Item, Summarizer, approx_tokens
from summarizer.engine import EngineSettings, LlamaEngine
from tests.fixtures.daemon import wait_until
from watcher.eval.harness import DaemonProcess
from watcher.serve.digestpool import DigestPool

TOOL = "".join(
    f"2026-01-01T10:{i % 60:02d}:00 INFO worker-{i % 3} batch {i} took {i * 7 % 900} ms\n" for i in range(80)
)
PROSE = "The parser drops the last field when a line ends with a tab; I will keep it and add a test. " * 5


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


def alive(pids: list[int]) -> bool:
    return any(Path(f"/proc/{pid}").exists() for pid in pids)


def mapped(pid: int) -> str:
    """What a process has mapped (/proc/PID/maps): its shared libraries among them."""
    return Path(f"/proc/{pid}/maps").read_text()


def items(count: Callable[[str], int]) -> list[Item]:
    texts = [("tool_result", TOOL), ("assistant", PROSE), ("tool_result", TOOL.upper())]
    return [Item(f"s{i}", kind, text, count(text)) for i, (kind, text) in enumerate(texts)]


async def test_worker_digest_is_counted_with_the_models_tokenizer_and_fits(model_path: str) -> None:
    """The worker estimates (it holds no tokenizer); the digest it hands back is counted for real,
    fits the target, and is about as large as the one counted with the tokenizer throughout."""
    engine = LlamaEngine(EngineSettings(model_path))
    pool = DigestPool()
    try:
        real = Summarizer(engine)
        pooled = pool.summarizer(real)
        assert pooled.engine is None
        region = items(real.count)
        for target in (120, 200, 400):
            remote = await pooled.digest(region, "a7", target)
            local = await Summarizer(None, count=engine.count_tokens).digest(region, "a7", target)
            assert remote.tokens == engine.count_tokens(remote.text) <= target
            assert remote.tokens >= 0.85 * local.tokens and remote.method == "deterministic"
        assert pool.remote == 3 and pool.local == 0
        assert pool._pool is not None
        (worker,) = pool._pool._processes
        assert "libllama" not in mapped(worker)  # no tokenizer in the worker: llama.cpp is not even loaded
    finally:
        pool.close()
        engine.close()


async def test_a_digest_whose_estimate_was_far_off_is_fitted_again(model_path: str) -> None:
    """Sections whose counts say half their real size make the worker's estimate half the real
    count: the digest it fits first is twice the target, so it is fitted once more, to fit."""
    engine = LlamaEngine(EngineSettings(model_path))
    pool = DigestPool()
    try:
        pooled = pool.summarizer(Summarizer(engine))
        region = items(lambda text: engine.count_tokens(text) // 2)
        digest = await pooled.digest(region, "a7", 200)
        assert pool.refits == 1
        assert digest.tokens == engine.count_tokens(digest.text) <= 200
    finally:
        pool.close()
        engine.close()


async def test_a_dead_worker_falls_back_then_restarts() -> None:
    pool = DigestPool()
    try:
        pooled = pool.summarizer(Summarizer(None))
        region = items(approx_tokens)
        first = await pooled.digest(region, "a1", 200)
        assert pool._pool is not None
        worker = next(iter(pool._pool._processes))  # the one worker's pid
        os.kill(worker, signal.SIGKILL)
        await wait_until(lambda: not alive([worker]), 5, "the killed worker is gone")
        second = await pooled.digest(region, "a1", 200)  # computed on the loop instead
        assert pool.local == 1 and second.text == first.text
        pool._retry_at = 0.0  # (skip the back-off)
        third = await pooled.digest(region, "a1", 200)  # a fresh worker
        assert pool.remote == 2 and pool.restarts == 2 and third.text == first.text
    finally:
        pool.close()


@pytest.mark.slow
async def test_worker_dies_with_a_killed_daemon(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path, None, model=False)
    await daemon.wait_ready(30)
    async with AgentLink(daemon.endpoint, agent="orphan-check", budget=2000, timeout_s=30) as link:
        i = 0
        while link.proposals.empty():  # until a compaction has run (the worker exists then)
            await link.append(Section(f"s{i}", "tool_result", TOOL, tokens=400), wait=True)
            i += 1
            await asyncio.sleep(0.02)
        children = children_of(daemon.proc.pid)
        assert children, "no digest worker was started"
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.stop()
    await wait_until(lambda: not alive(children), 5, "the worker exits with the daemon")
    assert not alive(children), "the worker outlived the daemon"
