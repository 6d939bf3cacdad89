"""`compactd bench ingest`: how fast the daemon takes in DELTAs, next to the cost of moving the bytes.

Two servers run as subprocesses on private ipc sockets, and the same client drives both with the
same msgpack frames:

* the daemon (`compactd run --no-model`): every DELTA is decoded, validated, applied to the
  agent's mirror, checked for compaction, and answered with SYNCED (the DELTA carries an ``id``);
* a bare pyzmq ROUTER that echoes every frame back (what moving the bytes costs at minimum).

Phases (each ``seconds`` long; daemon and raw alternate ``rounds`` times, which goes first
alternating too, since both share the machine's cores with the client and anything else running;
every figure is the median over the rounds, and the ratios also carry their range, ``*_spread``):

1. throughput: N agents, ``window`` deltas in flight each → deltas/s and msgs/s;
2. latency: N agents, one delta in flight each (send → SYNCED), p50/p99 in ms — an upper bound on
   the daemon's receive → mirror updated → scored time, since it includes both transports;
3. incremental cost: one agent whose context is 10k tokens, then one whose context is 1M tokens
   (budget twice the context in both), same deltas; the daemon process's CPU time per delta
   (user + system, all threads, from /proc) gives the ratio.

CPU time per message is also reported for both servers and for the client: it depends much less
on what else runs on the machine than rates and latencies do. ``cpu_ratio_vs_raw`` is the echo
server's CPU per message over the daemon's CPU per delta (the load-independent form of
``ratio_vs_raw``). The raw loop's rate is usually bounded
by the client (one Python process sending and receiving), which ``client_cpu_us_per_msg`` shows.

Each delta appends one section (50 tokens) and removes the oldest section the bench appended, so
a context keeps its size. Frames are pre-encoded once and patched in place (fixed-width ints and
ids), so building one costs the same, and almost nothing, in both runs.
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from ipc.protocol import T, decode, encode
from watcher.eval.bench.goals import BenchError, Goal, in_range, judge, spread
from watcher.eval.bench.procstat import cpu_seconds
from watcher.eval.harness import DaemonProcess, ReplayError
from watcher.eval.scorecard import percentile

SECTION_TOKENS = 50
SECTION_TEXT = (
    "tests/test_io.py::test_roundtrip PASSED [ 42%] — read 4096 bytes from fixture data/sample.bin, "
    "checksum 0x5f3c9a1e ok; elapsed 0.013 s"
)
FILLER_TOKENS = 500  # the sections that make up the 10k / 1M contexts
FILLER_TEXT = "x = compute(a, b)  # filler line of a large file read\n" * 28  # ~1.5k chars
BENCH_SECTIONS = 100  # sections the bench appends and removes (kept in the context)
START_VERSION = 1_000_000  # the mirror version after the SNAPSHOT (any non-negative int works)
_U32 = struct.Struct(">I")

ECHO_SERVER = """
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
s.setsockopt(zmq.LINGER, 0)
s.setsockopt(zmq.SNDHWM, 1000)
s.setsockopt(zmq.RCVHWM, 1000)
s.bind(sys.argv[1])
print("ready", flush=True)
while True:
    s.send_multipart(s.recv_multipart())
"""


@dataclass(frozen=True)
class IngestSettings:
    agents: int = 4
    seconds: float = 3.0
    window: int = 32
    rounds: int = 3

    def __post_init__(self) -> None:
        in_range(
            agents=(self.agents, 1, 256),
            seconds=(self.seconds, 0.2, 600),
            window=(self.window, 1, 500),
            rounds=(self.rounds, 1, 10),
        )


# --- frames -------------------------------------------------------------------------------------------


def _sid(n: int) -> bytes:
    return b"b%010d" % n


class DeltaStream:
    """The DELTA frames of one agent: append b<k+W>, remove b<k>, version V+k → V+k+1, id k+1."""

    def __init__(self) -> None:
        sentinel_id, sentinel_base, sentinel_version = 0xF0000001, 0xF0000002, 0xF0000003
        msg = {
            "t": T.DELTA,
            "id": sentinel_id,
            "base": sentinel_base,
            "version": sentinel_version,
            "ops": [
                {
                    "op": "append",
                    "sections": [
                        {
                            "id": "b9999999990",
                            "kind": "tool_result",
                            "text": SECTION_TEXT,
                            "tokens": SECTION_TOKENS,
                        }
                    ],
                },
                {"op": "remove", "ids": ["b9999999991"]},
            ],
        }
        self.buf = bytearray(encode(msg))
        self._at = {
            name: self._find(b"\xce" + _U32.pack(v)) + 1
            for name, v in (("id", sentinel_id), ("base", sentinel_base), ("version", sentinel_version))
        }
        self._new = self._find(b"b9999999990")
        self._old = self._find(b"b9999999991")
        self.k = 0

    def _find(self, needle: bytes) -> int:
        at = self.buf.find(needle)
        if at < 0 or self.buf.find(needle, at + 1) >= 0:
            raise BenchError(f"template field {needle!r} not found exactly once")
        return at

    def next_frame(self) -> bytes:
        k = self.k
        self.k += 1
        buf, at = self.buf, self._at
        _U32.pack_into(buf, at["id"], k + 1)
        _U32.pack_into(buf, at["base"], START_VERSION + k)
        _U32.pack_into(buf, at["version"], START_VERSION + k + 1)
        buf[self._new : self._new + 11] = _sid(k + BENCH_SECTIONS)
        buf[self._old : self._old + 11] = _sid(k)
        return bytes(buf)


def context_sections(tokens: int) -> list[dict[str, Any]]:
    """Filler sections making ``tokens`` together with the bench's own sections."""
    n = max(0, tokens - BENCH_SECTIONS * SECTION_TOKENS) // FILLER_TOKENS
    filler = [
        {"id": f"f{i}", "kind": "tool_result", "text": FILLER_TEXT, "tokens": FILLER_TOKENS} for i in range(n)
    ]
    mine = [
        {"id": _sid(i).decode(), "kind": "tool_result", "text": SECTION_TEXT, "tokens": SECTION_TOKENS}
        for i in range(BENCH_SECTIONS)
    ]
    return filler + mine


# --- the client side ------------------------------------------------------------------------------------


class Agents:
    """N DEALER sockets, each with its DeltaStream; attached to the daemon, or to the echo server."""

    def __init__(self, zctx: zmq.Context[Any], endpoint: str, n: int) -> None:
        self.socks = []
        for _ in range(n):
            s = zctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 1000)
            s.setsockopt(zmq.RCVHWM, 1000)
            s.connect(endpoint)
            self.socks.append(s)
        self.streams = [DeltaStream() for _ in range(n)]
        self.poller = zmq.Poller()
        for s in self.socks:
            self.poller.register(s, zmq.POLLIN)
        self.index = {s: i for i, s in enumerate(self.socks)}

    def close(self) -> None:
        for s in self.socks:
            s.close(0)

    def attach(self, names: list[str], context_tokens: int) -> None:
        """HELLO + SNAPSHOT for each agent (daemon only)."""
        sections = context_sections(context_tokens)
        for s, name in zip(self.socks, names, strict=True):
            budget = max(2 * context_tokens, 20_000)
            hello = {"t": T.HELLO, "id": 1, "agent": name, "budget": budget, "versions": [1]}
            expect(s, hello, T.WELCOME)
            snap = {"t": T.SNAPSHOT, "id": 2, "version": START_VERSION, "sections": sections}
            expect(s, snap, T.SYNCED)

    def throughput(self, seconds: float, window: int, reply: bytes) -> tuple[int, float]:
        """Keep ``window`` frames in flight per agent for ``seconds``; (replies, elapsed s)."""
        n = len(self.socks)
        inflight = [0] * n
        done = 0
        t0 = time.perf_counter()
        end = t0 + seconds
        while time.perf_counter() < end:
            for i in range(n):
                s, stream = self.socks[i], self.streams[i]
                while inflight[i] < window:
                    s.send(stream.next_frame())
                    inflight[i] += 1
            for sock, _ in self.poller.poll(1000):
                i = self.index[sock]
                while True:
                    try:
                        frame = sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    check(frame, reply)
                    inflight[i] -= 1
                    done += 1
        elapsed = time.perf_counter() - t0
        self._drain(inflight, reply)
        return done, elapsed

    def latency(self, seconds: float, reply: bytes) -> list[float]:
        """One frame in flight per agent; the round trips in seconds."""
        n = len(self.socks)
        sent = [0.0] * n
        rtts: list[float] = []
        for i in range(n):
            sent[i] = time.perf_counter()
            self.socks[i].send(self.streams[i].next_frame())
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for sock, _ in self.poller.poll(1000):
                i = self.index[sock]
                frame = sock.recv()
                now = time.perf_counter()
                check(frame, reply)
                rtts.append(now - sent[i])
                sent[i] = time.perf_counter()
                sock.send(self.streams[i].next_frame())
        self._drain([1] * n, reply)
        return rtts

    def _drain(self, inflight: list[int], reply: bytes) -> None:
        deadline = time.monotonic() + 30
        while sum(inflight) and time.monotonic() < deadline:
            for sock, _ in self.poller.poll(1000):
                check(sock.recv(), reply)
                inflight[self.index[sock]] -= 1
        if sum(inflight):
            raise BenchError(f"{sum(inflight)} replies never came")


def expect(sock: zmq.Socket[Any], msg: dict[str, Any], t: str) -> dict[str, Any]:
    sock.send(encode(msg))
    if not sock.poll(30_000):
        raise BenchError(f"no answer to {msg['t']}")
    reply = decode(sock.recv(), 1 << 30)
    if reply.get("t") != t:
        raise BenchError(f"{msg['t']} answered with {reply}")
    return reply


def check(frame: bytes, reply: bytes) -> None:
    if reply not in frame[:24]:
        raise BenchError(f"unexpected reply {decode(frame, 1 << 30)}")


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def daemon_busy(zctx: zmq.Context[Any], endpoint: str) -> tuple[float, int]:
    """(busy_s, frames) of the daemon, asked by an unattached peer."""
    s = zctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    try:
        d = expect(s, {"t": T.STATUS, "id": 1}, T.STATE)["daemon"]
    finally:
        s.close(0)
    return float(d["busy_s"]), int(d["frames"])


# --- the servers ----------------------------------------------------------------------------------------


class EchoServer:
    def __init__(self, endpoint: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ECHO_SERVER, endpoint], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise BenchError("the echo server did not start")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _seq() -> Iterator[int]:
    n = 0
    while True:
        n += 1
        yield n


def run_ingest(s: IngestSettings) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="compactd-bench-") as tmp:
        workdir = Path(tmp)
        daemon = DaemonProcess(workdir, None, model=False)
        echo = None
        zctx: zmq.Context[Any] = zmq.Context()
        try:
            try:
                asyncio.run(daemon.wait_ready())
            except ReplayError as exc:
                raise BenchError(str(exc)) from exc
            echo_ep = f"ipc://{workdir / 'echo.sock'}"
            echo = EchoServer(echo_ep)
            return _measure(s, zctx, (daemon.endpoint, daemon.proc.pid), (echo_ep, echo.proc.pid))
        finally:
            if echo is not None:
                echo.stop()
            daemon.stop()
            zctx.term()


def _phase(
    kind: str, zctx: zmq.Context[Any], server: tuple[str, int], s: IngestSettings, names: Iterator[int]
) -> dict[str, float]:
    """One timed throughput phase and one latency phase against one server (a fresh set of agents)."""
    endpoint, pid = server
    agents = Agents(zctx, endpoint, s.agents)
    try:
        reply = b"DELTA" if kind == "raw" else b"SYNCED"
        if kind == "daemon":
            agents.attach([f"bench-{os.getpid()}-{next(names)}" for _ in range(s.agents)], 10_000)
            busy0, frames0 = daemon_busy(zctx, endpoint)
        cpu0, mine0 = cpu_seconds(pid), own_cpu()
        done, elapsed = agents.throughput(s.seconds, s.window, reply)
        cpu1, mine1 = cpu_seconds(pid), own_cpu()
        out = {"rate": done / elapsed, "cpu": (cpu1 - cpu0) / done, "client_cpu": (mine1 - mine0) / done}
        if kind == "daemon":
            busy1, frames1 = daemon_busy(zctx, endpoint)
            out["busy"] = (busy1 - busy0) / max(1, frames1 - frames0 - 1)
        rtts = agents.latency(s.seconds, reply)
        out["p50"], out["p99"] = percentile(rtts, 50) * 1e3, percentile(rtts, 99) * 1e3
        return out
    finally:
        agents.close()


def _scale_round(daemon: tuple[str, int], s: IngestSettings, small: Agents, big: Agents) -> float:
    """CPU per delta of the daemon, 1M-token context over 10k-token context, in one round."""
    cost = {}
    for tokens, agents in ((10_000, small), (1_000_000, big)):
        cpu0 = cpu_seconds(daemon[1])
        done, _elapsed = agents.throughput(s.seconds, s.window, b"SYNCED")
        cost[tokens] = (cpu_seconds(daemon[1]) - cpu0) / done
    return cost[1_000_000] / cost[10_000] if cost[10_000] else 0.0


def _measure(
    s: IngestSettings, zctx: zmq.Context[Any], daemon: tuple[str, int], echo: tuple[str, int]
) -> dict[str, Any]:
    names = _seq()
    sample = DeltaStream().next_frame()
    rounds: dict[str, list[dict[str, float]]] = {"daemon": [], "raw": []}
    for r in range(s.rounds):  # interleaved, and which server goes first alternates
        for kind in ("raw", "daemon") if r % 2 == 0 else ("daemon", "raw"):
            rounds[kind].append(_phase(kind, zctx, daemon if kind == "daemon" else echo, s, names))
    d, raw = rounds["daemon"], rounds["raw"]
    ratio = [a["rate"] / b["rate"] for a, b in zip(d, raw, strict=True)]
    cpu_ratio = [b["cpu"] / a["cpu"] for a, b in zip(d, raw, strict=True)]
    small, big = Agents(zctx, daemon[0], 1), Agents(zctx, daemon[0], 1)
    try:
        small.attach([f"bench-{os.getpid()}-{next(names)}"], 10_000)
        big.attach([f"bench-{os.getpid()}-{next(names)}"], 1_000_000)
        cost_ratio = [_scale_round(daemon, s, small, big) for _ in range(s.rounds)]
    finally:
        small.close()
        big.close()

    def med(rows: list[dict[str, float]], key: str, scale: float = 1.0, digits: int = 3) -> float:
        return round(statistics.median(x[key] for x in rows) * scale, digits)

    result: dict[str, Any] = {
        "daemon_deltas_per_s": round(med(d, "rate")),
        "raw_pyzmq_msgs_per_s": round(med(raw, "rate")),
        "ratio_vs_raw": spread(ratio)["median"],
        "ratio_vs_raw_spread": spread(ratio),
        "p50_ms": med(d, "p50"),
        "p99_ms": med(d, "p99"),
        "raw_p50_ms": med(raw, "p50"),
        "raw_p99_ms": med(raw, "p99"),
        "per_delta_cost_ratio_1m_vs_10k": spread(cost_ratio)["median"],
        "per_delta_cost_ratio_1m_vs_10k_spread": spread(cost_ratio),
        "daemon_cpu_us_per_delta": med(d, "cpu", 1e6, 2),
        "raw_server_cpu_us_per_msg": med(raw, "cpu", 1e6, 2),
        "cpu_ratio_vs_raw": spread(cpu_ratio)["median"],
        "cpu_ratio_vs_raw_spread": spread(cpu_ratio),
        "client_cpu_us_per_msg": {
            "raw": med(raw, "client_cpu", 1e6, 2),
            "daemon": med(d, "client_cpu", 1e6, 2),
        },
        "daemon_handle_us_per_delta": med(d, "busy", 1e6, 2),
        "settings": {
            "agents": s.agents,
            "seconds": s.seconds,
            "window": s.window,
            "rounds": s.rounds,
            "frame_bytes": len(sample),
            "section_tokens": SECTION_TOKENS,
            "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2),
        },
    }
    return judge(
        result,
        [
            Goal("ratio_vs_raw", result["ratio_vs_raw"], ">=", 0.5),
            Goal("per_delta_cost_ratio_1m_vs_10k", result["per_delta_cost_ratio_1m_vs_10k"], "<=", 1.5),
        ],
    )
