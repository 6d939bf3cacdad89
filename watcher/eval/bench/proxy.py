"""`compactd bench proxy`: a recorded conversation replayed through a real `compactd proxy` to a
real upstream on the SmolLM2 GGUF (llama-cpp-python's server for the OpenAI API, llama.cpp's
llama-server for the Anthropic Messages API), with a real daemon behind the proxy.

Replay: the trajectory becomes a provider conversation (watcher.eval.bench.chats); turn by turn the
history grows by the recorded messages and is POSTed through the proxy, as an agent would (the
model's answers are not used: the recorded ones are the next turn's). Measured:

* ``accepted``: requests the upstream answered 200 (a broken tool pair or role order is a 400);
* ``max_request_tokens``: the largest prompt the upstream counted (its own tokenizer);
* ``waited_requests``: requests the proxy held longer than 0.5 s (waiting for a digest would);
* ``prefix_kept_fraction``: of the prefix tokens the provider could have cached (each request's
  predecessor), the fraction the next request repeated byte-identically; busts are listed by reason;
* ``added_latency_ms_p99``: a ~100k-token conversation sent alternately straight to the upstream
  and through a proxy (each round one message longer, as an agent's would be), on a path the
  upstream answers at once (404), so that its own time is ~1 ms on both sides; the paired
  difference of the wall times, p99 (``proxy_inside_ms_*``: the proxy's own log of the same).

Goals (the issue's): every request accepted and within the window, none waited, prefix kept
>= 0.95, added latency p99 <= 5 ms. A goal missed exits non-zero."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from summarizer.gguf import ModelError
from summarizer.weights import convert, normalize
from watcher.eval.bench.chats import anthropic_turns, openai_turns
from watcher.eval.bench.goals import BenchError, Goal, judge
from watcher.eval.bench.llama_server import (
    LlamaCppPythonServer,
    LlamaServer,
    ModelServer,
    UpstreamError,
    stop_process,
)
from watcher.eval.harness import running_daemon, watcher_argv
from watcher.eval.scorecard import percentile
from watcher.eval.trajectories import Trajectory, load
from watcher.runtime.paths import default_model_path

DEFAULT_TRAJECTORIES = Path(__file__).resolve().parents[4] / "shared" / "trajectories"
DEFAULT_TRAJECTORY = "mini-swe-agent/sympy__sympy-13091.traj.json"  # 130 turns, the longest
LATENCY_MODEL = "bench-latency"  # a model name the proxy is told has a 1M window
PROBE = "/latency-probe"  # a path prefix the upstream answers 404 at once
WAIT_S = 0.5


@dataclass(frozen=True)
class ProxyBenchSettings:
    trajectory: str = ""
    api: str = "openai"
    turns: int = 100
    window: int = 32768
    model: bool = True
    latency_rounds: int = 60
    latency_tokens: int = 100_000
    turn_interval: float = 0.0
    workdir: str = ""
    upstream_weights: str = "q4_0"  # the upstream's GGUF: re-encoded as the daemon's default ("" = shipped)


class ProxyProcess:
    """`compactd proxy` as a subprocess; its port is read from its ready line."""

    def __init__(
        self, workdir: Path, upstream: str, endpoint: str, windows: list[str], log_name: str = "proxy.log"
    ) -> None:
        self.log_path = workdir / log_name
        cmd = watcher_argv("proxy", "--listen", "127.0.0.1:0", "--upstream", upstream)
        cmd += ["--socket", endpoint]
        for w in windows:
            cmd += ["--window", w]
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        self.url = ""

    async def wait_ready(self, limit_s: float = 60.0) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"proxy exited with {self.proc.returncode}: {self.log_tail()}")
            m = re.search(rb"proxy_ready listen=(\S+):(\d+)", self.log_path.read_bytes())
            if m:
                self.url = f"http://{m.group(1).decode()}:{int(m.group(2))}"
                return
            await asyncio.sleep(0.05)
        raise BenchError(f"proxy not ready after {limit_s:g} s: {self.log_tail()}")

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> int:
        code = stop_process(self.proc, 30)
        self._log.close()
        return code


@contextlib.asynccontextmanager
async def _stack(s: ProxyBenchSettings, work: Path) -> AsyncIterator[tuple[ModelServer, ProxyProcess, str]]:
    # OpenAI: llama-cpp-python's server; Anthropic Messages: llama.cpp's llama-server
    upstream: ModelServer
    try:
        model = _weights(s.upstream_weights)
        upstream = (
            LlamaServer(work, ctx=s.window, model=model)
            if s.api == "anthropic"
            else LlamaCppPythonServer(work, ctx=s.window, model=model)
        )
    except (UpstreamError, ModelError) as exc:
        raise BenchError(str(exc)) from None
    try:
        await upstream.wait_ready()
        async with running_daemon(work, None, s.model) as daemon:
            windows = [f"smollm2={s.window}", f"{LATENCY_MODEL}=1000000"]
            proxy = ProxyProcess(work, upstream.url, daemon.endpoint, windows)
            try:
                await proxy.wait_ready()
                yield upstream, proxy, daemon.endpoint
            finally:
                code = proxy.stop()
                if code != 0:
                    raise BenchError(f"proxy stopped with exit code {code}: {proxy.log_tail()}")
    except UpstreamError as exc:
        raise BenchError(str(exc)) from None
    finally:
        upstream.stop()


def _weights(fmt: str) -> str:
    """The upstream's model file: the shipped GGUF re-encoded as ``fmt`` (cached, as the daemon's
    ``model.weights``: q4_0 prefills ~2.9x faster than the shipped Q4_1 on this CPU), or as shipped."""
    fmt = normalize(fmt)
    return convert(default_model_path(), fmt) if fmt else default_model_path()


def _trajectory(s: ProxyBenchSettings) -> Trajectory:
    return load(Path(s.trajectory) if s.trajectory else DEFAULT_TRAJECTORIES / DEFAULT_TRAJECTORY)[0]


def _request(
    api: str, system: str, history: list[dict[str, Any]], model: str = "smollm2"
) -> tuple[str, bytes]:
    body: dict[str, Any] = {"model": model, "max_tokens": 1, "messages": history}
    if api == "anthropic":
        body["system"] = system
        return "/v1/messages", json.dumps(body).encode()
    return "/v1/chat/completions", json.dumps(body).encode()


def _prompt_tokens(answer: dict[str, Any]) -> int:
    usage = answer.get("usage") or {}
    if "prompt_tokens" in usage:
        return int(usage["prompt_tokens"])
    return sum(
        int(usage.get(k) or 0)
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )


HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": "bench"}


async def _replay(s: ProxyBenchSettings, http: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    traj = _trajectory(s)
    if s.api == "anthropic":
        system, turns = anthropic_turns(traj)
    else:
        system, turns = "", openai_turns(traj)
    turns = turns[: s.turns + 1]  # turn 0 (prompt and task) + s.turns steps
    history: list[dict[str, Any]] = []
    statuses: list[int] = []
    tokens: list[int] = []
    times: list[float] = []
    errors: list[str] = []
    for turn in turns:
        history = history + turn
        where, body = _request(s.api, system, history)
        t0 = time.perf_counter()
        async with http.post(base + where, data=body, headers=HEADERS) as r:
            data = await r.read()
            statuses.append(r.status)
        times.append(time.perf_counter() - t0)
        if r.status == 200:
            tokens.append(_prompt_tokens(json.loads(data)))
        elif len(errors) < 5:
            errors.append(data[:300].decode(errors="replace"))
        if s.turn_interval:
            await asyncio.sleep(s.turn_interval)  # the agent's own time between two calls
    return {
        "trajectory": traj.name,
        "requests": len(statuses),
        "accepted": statuses.count(200),
        "errors": errors,
        "max_request_tokens": max(tokens, default=0),
        "upstream_s_median": round(percentile(times, 50), 3),
        "messages_last": len(history),
    }


async def _latency(
    s: ProxyBenchSettings, http: aiohttp.ClientSession, upstream: str, work: Path, endpoint: str
) -> dict[str, Any]:
    """A ~100k-token conversation, one message longer each round, sent alternately straight to
    the upstream and through a proxy, on a path of the same server that answers at once (404):
    the upstream's own time is then ~1 ms and the same on both sides, so the paired difference is
    what the proxy adds (its whole chat path runs: parse, identity, sections to the daemon)."""
    traj = _trajectory(s)
    flat = [m for turn in openai_turns(traj) for m in turn]
    history: list[dict[str, Any]] = []
    while sum(len(json.dumps(m)) for m in history) < s.latency_tokens * 4:  # ~4 bytes per token
        m = flat[len(history) % len(flat)]
        history.append(m if len(history) < len(flat) else {"role": "user", "content": m["content"] or "x"})
    direct = upstream + PROBE
    windows = [f"{LATENCY_MODEL}=1000000"]
    proxy = ProxyProcess(work, direct, endpoint, windows, log_name="proxy-latency.log")
    try:
        await proxy.wait_ready()
        added: list[float] = []
        direct_ms: list[float] = []
        for r in range(s.latency_rounds + 1):
            history = [*history, {"role": "user", "content": f"round {r}: go on"}]
            where, body = _request("openai", "", history, LATENCY_MODEL)
            pair: dict[str, float] = {}
            order = (("direct", direct), ("proxy", proxy.url))
            for name, base in order if r % 2 == 0 else order[::-1]:
                t0 = time.perf_counter()
                async with http.post(base + where, data=body, headers=HEADERS) as resp:
                    await resp.read()
                    if resp.status != 404:
                        raise BenchError(f"latency probe: expected the upstream's 404, got {resp.status}")
                pair[name] = (time.perf_counter() - t0) * 1000
            if r:  # round 0 is the conversation's first sight (every message new): reported apart
                added.append(pair["proxy"] - pair["direct"])
                direct_ms.append(pair["direct"])
            else:
                first = pair["proxy"] - pair["direct"]
    finally:
        proxy.stop()
    inside = [float(x) for x in re.findall(r"overhead_ms=([0-9.]+)", proxy.log_path.read_text())][1:]
    return {
        "latency_request_bytes": len(body),
        "latency_rounds": s.latency_rounds,
        "added_latency_ms_p50": round(percentile(added, 50), 3),
        "added_latency_ms_p99": round(percentile(added, 99), 3),
        "added_latency_ms_min": round(min(added), 3),
        "added_latency_ms_max": round(max(added), 3),
        "added_latency_ms_first_sight": round(first, 3),
        "direct_ms_p50": round(percentile(direct_ms, 50), 3),
        "proxy_inside_ms_p50": round(percentile(inside, 50), 3),
        "proxy_inside_ms_p99": round(percentile(inside, 99), 3),
    }


def _waited(metrics: str) -> tuple[int, float]:
    """Requests above WAIT_S in the proxy's overhead histogram, and its p99 bucket bound (ms)."""
    buckets = {
        float(m.group(1)): float(m.group(2))
        for m in re.finditer(r'compactd_proxy_overhead_seconds_bucket\{le="([^"+]+)"\} (\S+)', metrics)
    }
    total = float(re.search(r"compactd_proxy_overhead_seconds_count (\S+)", metrics).group(1))  # type: ignore[union-attr]
    below = buckets.get(WAIT_S, total)
    p99 = next((le for le, n in sorted(buckets.items()) if n >= 0.99 * total), float("inf"))
    return int(total - below), p99 * 1000


async def run_proxy_bench(s: ProxyBenchSettings) -> dict[str, Any]:
    if s.api not in ("openai", "anthropic"):
        raise BenchError(f"unknown api {s.api!r}: openai or anthropic")
    with tempfile.TemporaryDirectory(prefix="compactd-bench-proxy-") as tmp:
        work = Path(s.workdir) if s.workdir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        async with (
            _stack(s, work) as (upstream, proxy, endpoint),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=900)) as http,
        ):
            replay = await _replay(s, http, proxy.url)
            async with http.get(proxy.url + "/compactd/status") as r:
                status = await r.json()
            latency = await _latency(s, http, upstream.url, work, endpoint)
            async with http.get(proxy.url + "/metrics") as r:
                waited, overhead_p99 = _waited(await r.text())
        conv: dict[str, Any] = next((c for c in status["conversations"] if c["window"] == s.window), {})
        result: dict[str, Any] = {
            "settings": asdict(s),
            **replay,
            "window_tokens": s.window,
            "waited_requests": waited,
            "proxy_overhead_ms_p99_bucket": overhead_p99,
            "prefix_kept_fraction": conv.get("cache_kept_fraction", 0.0),
            "busts": status.get("busts", {}),
            "digests_in_last_request": conv.get("digests", 0),
            "upstream_tokens_estimated_last": conv.get("tokens_upstream", 0),
            **latency,
            "wall_s": round(time.monotonic() - t0, 1),
        }
    return judge(
        result,
        [
            Goal("requests accepted by the upstream", result["accepted"], "==", result["requests"]),
            # no request made: nothing was checked against the window
            Goal("largest request (tokens)", result["max_request_tokens"] or None, "<=", s.window),
            Goal("requests that waited on compaction", waited, "==", 0),
            Goal(
                "prefix kept byte-identical (fraction)",
                result["prefix_kept_fraction"] if result["requests"] > 1 else None,
                ">=",
                0.95,
            ),
            Goal("added latency p99 (ms)", result["added_latency_ms_p99"], "<=", 5.0),
            Goal("requests replayed (100 turns + 1)", result["requests"], ">=", 101),
        ],
    )
