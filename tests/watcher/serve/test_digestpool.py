"""Deterministic digests in a worker process without a tokenizer: counted with the model's tokenizer
when they come back, fitted again when the worker's estimate was far off, survive a dead worker,
and never outlive a daemon killed with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ipc.client import AgentLink
from ipc.context import Context
from ipc.sections import Section
from summarizer.digest import Item, Summarizer, approx_tokens
from summarizer.engine import EngineSettings, LlamaEngine
from tests.fixtures.daemon import wait_until
from watcher.eval.harness import DaemonProcess
from watcher.planning.features import features
from watcher.planning.planner import Watermarks
from watcher.serve.digestpool import DigestPool
from watcher.serve.session import Session, prepare_plan

TOOL = "".join(
    f"2026-01-01T10:{i % 60:02d}:00 INFO worker-{i % 3} batch {i} took {i * 7 % 900} ms\n" for i in range(80)
)
PROSE = "The parser drops the last field when a line ends with a tab; I will keep it and add a test. " * 5


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


def alive(pids: list[int]) -> bool:
    """Any of them running (a zombie, dead and not yet reaped by its parent, is not)."""
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            continue
        if state not in ("Z", "X"):
            return True
    return False


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_text()


def exists(pid: int) -> bool:
    """Running, or a zombie (dead, not yet reaped by its parent)."""
    return Path(f"/proc/{pid}").exists()


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
        worker = pool.worker_pid
        assert worker is not None
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
        worker = pool.worker_pid
        assert worker is not None
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


async def test_the_worker_is_one_plain_process_that_reports_errors_and_stops_on_close() -> None:
    """No multiprocessing: no resource tracker beside the worker, and none of the daemon's heavy
    imports in it (ZeroMQ, msgspec, llama.cpp). A request it fails on raises the worker's exception
    here and the worker goes on serving; close() ends it (reaped: no zombie), and a later digest
    starts another."""
    pool = DigestPool()
    try:
        region = items(approx_tokens)
        first = await pool.summarizer(Summarizer(None)).digest(region, "a1", 200)
        worker = pool.worker_pid
        assert worker is not None and worker in children_of(os.getpid())
        assert not any("resource_tracker" in cmdline(p) for p in children_of(os.getpid()))
        maps = mapped(worker)
        assert all(lib not in maps for lib in ("libzmq", "libllama", "msgspec"))
        with pytest.raises(AttributeError):
            await pool._in_worker(["not an item"], "a1", 200, None)  # type: ignore[list-item]
        again = await pool.summarizer(Summarizer(None)).digest(region, "a1", 200)
        assert again.text == first.text and pool.worker_pid == worker and pool.local == 0
        pool.close()
        assert not exists(worker)
        after = await pool.summarizer(Summarizer(None)).digest(region, "a1", 200)  # started again
        assert after.text == first.text and pool.restarts == 2 and pool.local == 0
    finally:
        pool.close()


async def test_planner_features_computed_in_the_worker_are_the_ones_computed_here() -> None:
    """The worker runs watcher.planning.features.features on the texts it is handed: the same
    features (names interned here as in-process features are), with and without BM25 terms; a
    dead worker gives None, and prepare_plan then computes them here."""
    texts = [TOOL, PROSE, "def parse_header(b): return MyReader(b)  # io_utils.py\n" * 40, ""]
    pool = DigestPool()
    try:
        for with_terms in (False, True):
            got = await pool.features(texts, with_terms)
            assert got == [features(t, with_terms) for t in texts]
        assert pool.features_remote == 2 * len(texts)
        (third,) = (await pool.features(texts[2:3], False)) or [None]
        assert third is not None and all(sys.intern(n) is n for n in third.idents)
        ctx = [Section(f"s{i}", "tool_result", t, tokens=approx_tokens(t)) for i, t in enumerate(texts)]
        state = Session("a", "s", b"peer", Watermarks(8000, 0.2, 0.6))
        state.ctx = Context(ctx, 1)
        await prepare_plan(state, remote=pool.features)
        assert state.scorer.missing(ctx) == [] and pool.features_remote == 3 * len(texts) + 1
        worker = pool.worker_pid
        assert worker is not None
        os.kill(worker, signal.SIGKILL)
        await wait_until(lambda: not alive([worker]), 5, "the killed worker is gone")
        assert await pool.features(texts, False) is None  # and the worker backs off
        state.ctx = Context([*ctx, Section("s9", "assistant", PROSE + " again", tokens=40)], 2)
        await prepare_plan(state, remote=pool.features)  # computed here instead
        assert state.scorer.missing(list(state.ctx)) == []
    finally:
        pool.close()
