"""Prometheus metrics: scraped over real HTTP from a real daemon subprocess (no model: fast)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import zmq
import zmq.asyncio
from prometheus_client.parser import text_string_to_metric_families

from ipc.client import AgentLink
from ipc.protocol import Proposal, decode
from ipc.sections import Section
from summarizer.digest import Summarizer
from tests.fixtures.net import free_port
from watcher.config.settings import Config
from watcher.eval.harness import DaemonProcess, daemon_argv
from watcher.observe.metrics import MAX_AGENT_SERIES, Metrics
from watcher.planning.planner import Watermarks
from watcher.serve.server import Server
from watcher.serve.session import Session

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape_raw(
    port: int, path: str = "/metrics", headers: dict[str, str] | None = None
) -> tuple[int, str, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def parse(text: str) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(port: int) -> Samples:
    status, _, body = await asyncio.to_thread(scrape_raw, port)
    assert status == 200, body
    return parse(body)


async def fill_until_applied(link: AgentLink, want: int, limit: int = 200) -> list[Proposal]:
    """Append tool output until ``want`` proposals were applied; returns them."""
    applied: list[Proposal] = []
    for i in range(limit):
        text = "".join(f"row {i}.{j}: value={i * 31 + j} status=ok\n" for j in range(12))
        await link.append(Section(f"s{i}", "tool_result", text), wait=True)
        # proposals arrive asynchronously (the first digest also starts the digest worker): give
        # the daemon a moment per turn, as an agent's own LLM call would
        with contextlib.suppress(TimeoutError):
            p = await asyncio.wait_for(link.proposals.get(), 0.05)
            if await link.apply(p):
                applied.append(p)
        while not link.proposals.empty():
            p = link.proposals.get_nowait()
            if await link.apply(p):
                applied.append(p)
        if len(applied) >= want:
            break
    assert len(applied) >= want, f"only {len(applied)} proposals applied"
    await link.status()  # a round trip: the daemon has handled the ACKs
    return applied


@pytest.fixture
async def metrics_daemon(tmp_path: Path) -> AsyncIterator[tuple[DaemonProcess, int]]:
    port = free_port()
    proc = DaemonProcess(tmp_path, None, model=False, extra_args=("--metrics", f"127.0.0.1:{port}"))
    try:
        await proc.wait_ready(60)
        yield proc, port
    finally:
        proc.stop()


async def test_scrape_reflects_agents_compactions_and_errors(
    metrics_daemon: tuple[DaemonProcess, int],
) -> None:
    daemon, port = metrics_daemon
    before = await scrape(port)
    assert before[("compactd_agents", ())] == 0
    assert before[("compactd_compactions_total", ())] == 0
    assert before[("compactd_summarizer_degraded", ())] == 1  # --no-model
    assert before[("compactd_errors_total", (("code", "bad_frame"),))] == 0

    ctx = zmq.asyncio.Context()
    bad = ctx.socket(zmq.DEALER)
    bad.connect(daemon.endpoint)
    try:
        await bad.send(b"\xc1 not msgpack")
        assert decode(await asyncio.wait_for(bad.recv(), 5))["code"] == "bad_frame"
    finally:
        bad.close(0)
        ctx.term()

    async with AgentLink(daemon.endpoint, agent="metrics-1", budget=3000, reserve=0.2) as link:
        applied = await fill_until_applied(link, 2)
        status = (await link.status())["agents"][0]
        m = await scrape(port)
        agent = (("agent", "metrics-1"),)
        assert m[("compactd_agents", ())] == 1
        assert m[("compactd_agent_tokens", agent)] == status["tokens"] > 0
        assert m[("compactd_agent_budget_tokens", agent)] == 3000
        assert m[("compactd_agent_usage_ratio", agent)] == pytest.approx(status["tokens"] / 3000)
        assert m[("compactd_agent_headroom_ratio", agent)] == pytest.approx(1 - status["tokens"] / 3000)
        assert m[("compactd_agent_reserve_ratio", agent)] == pytest.approx(0.2)
        assert m[("compactd_compactions_total", ())] == len(applied) == status["compactions"]
        saved = sum(p.tokens_before - p.tokens_after for p in applied)
        assert m[("compactd_tokens_saved_total", ())] == saved == status["tokens_saved"]
        invalidated = sum(p.invalidated_prefix_tokens for p in applied)
        assert m[("compactd_invalidated_prefix_tokens_total", ())] == invalidated > 0
        assert m[("compactd_proposals_total", (("outcome", "applied"),))] == len(applied)
        assert m[("compactd_proposals_total", (("outcome", "sent"),))] >= len(applied)
        assert m[("compactd_summarizer_latency_seconds_count", ())] >= len(applied)
        assert ("compactd_summarizer_queue_depth", ()) in m
        assert m[("compactd_errors_total", (("code", "bad_frame"),))] == 1
        assert m[("compactd_frames_total", ())] > 0
        lag = {q: m[("compactd_loop_lag_seconds", (("quantile", q),))] for q in ("0.5", "0.99", "1")}
        assert 0 <= lag["0.5"] <= lag["0.99"] <= lag["1"] < 5, lag  # the serving loop's lag, sampled
        loop_lag = (await link.status())["daemon"]["loop_lag"]
        assert loop_lag["samples"] > 0 and loop_lag["ms_p50"] <= loop_lag["ms_p99"] <= loop_lag["ms_max"]
        assert m[("process_resident_memory_bytes", ())] > 0

        # the originals those proposals archived reach the search index (a thread of the store)
        for _ in range(100):
            m = await scrape(port)
            if m[("compactd_store_index_pending_rows", ())] == 0:
                break
            await asyncio.sleep(0.1)
        assert m[("compactd_store_index_pending_rows", ())] == 0
        store = (await link.status())["daemon"]["store"]
        assert m[("compactd_store_indexed_rows_total", ())] == store["indexed_rows"] > 0
        assert m[("compactd_store_write_gate_wait_seconds_total", ())] == store["write_gate_waited_s"] >= 0
        assert store["index_failures"] == 0
        for _ in range(30):  # STATUS's counts are at most a second old (counts_age_s)
            if store["index_pending_rows"] == 0:
                break
            await asyncio.sleep(0.1)
            store = (await link.status())["daemon"]["store"]
        assert store["index_pending_rows"] == 0
        assert m[("compactd_store_thread_failures_total", (("thread", "indexer"),))] == 0
        assert ("compactd_store_wal_checkpoints_total", (("kind", "inline"),)) in m

    after = await scrape(port)  # the agent detached: its series go, the counters stay
    assert after[("compactd_agents", ())] == 0
    assert not any(name == "compactd_agent_tokens" for name, _ in after)
    assert after[("compactd_compactions_total", ())] == len(applied)


async def test_http_paths_methods_and_openmetrics(metrics_daemon: tuple[DaemonProcess, int]) -> None:
    _, port = metrics_daemon
    status, ctype, body = await asyncio.to_thread(scrape_raw, port, "/nope")
    assert status == 404 and "/metrics" in body
    status, ctype, body = await asyncio.to_thread(
        scrape_raw, port, "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert status == 200 and ctype.startswith("application/openmetrics-text")
    assert body.rstrip().endswith("# EOF")
    status, ctype, body = await asyncio.to_thread(scrape_raw, port, "/")
    assert status == 200 and ctype.startswith("text/plain") and "compactd_agents" in body

    def raw(request: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(request)
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
            return b"".join(chunks)

    head = await asyncio.to_thread(raw, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")  # headers only
    post = await asyncio.to_thread(raw, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert post.startswith(b"HTTP/1.1 405")
    garbage = await asyncio.to_thread(raw, b"\x16\x03\x01 hello\r\n\r\n")
    assert garbage.startswith(b"HTTP/1.1 400")
    # the exporter is still serving after all that
    assert (await scrape(port))[("compactd_agents", ())] == 0


def test_metrics_port_in_use_fails_clearly(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run(
            [*daemon_argv(f"ipc://{tmp_path}/m.sock", tmp_path / "st"), "--metrics", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert out.returncode == 1
    assert f"metrics.listen 127.0.0.1:{port}" in out.stderr and "in use" in out.stderr
    assert not (tmp_path / "m.sock").exists()  # the IPC socket was cleaned up too


async def test_per_agent_series_are_bounded(tmp_path: Path) -> None:
    """A real Server with many agents: only MAX_AGENT_SERIES get per-agent series, least headroom first."""
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.bind(f"ipc://{tmp_path}/b.sock")
    try:
        server = Server(sock, Config(), Summarizer(None))
        n = MAX_AGENT_SERIES + 25
        for i in range(n):
            state = Session(f"agent-{i:03d}", "s", f"peer{i}".encode(), Watermarks(10_000, 0.2, 0.6))
            state.ctx.reset([Section("a", "user", "x", tokens=10 * i + 1)], 1)
            server.agents[state.agent] = state
        text = Metrics(server).render()[0].decode()
    finally:
        sock.close(0)
        ctx.term()
    m = parse(text)
    listed = sorted(dict(labels)["agent"] for name, labels in m if name == "compactd_agent_usage_ratio")
    assert len(listed) == MAX_AGENT_SERIES
    assert listed == [f"agent-{i:03d}" for i in range(n - MAX_AGENT_SERIES, n)]  # the fullest ones
    assert m[("compactd_agents", ())] == n
    assert m[("compactd_agents_unlisted", ())] == n - MAX_AGENT_SERIES
    assert m[("compactd_headroom_min_ratio", ())] == pytest.approx(1 - (10 * (n - 1) + 1) / 10_000)
