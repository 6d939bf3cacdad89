"""`compactd bench ingest`: how fast the daemon takes in DELTAs, next to the cost of moving the bytes.

Two servers run as subprocesses on private ipc sockets, and the same client drives both with the
same msgpack frames:

* the daemon (`compactd run --no-model`): every DELTA is decoded, validated, applied to the
  agent's mirror, checked for compaction, and answered with SYNCED (the DELTA carries an ``id``);
* a bare pyzmq ROUTER that echoes every frame back (what moving the bytes costs at minimum).

Phases (each ``seconds`` long; daemon and raw alternate ``rounds`` times and the best of each is
kept, since both share the machine's cores with the client and anything else running):

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
import math
import os
import resource
import signal
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
from watcher.eval.harness import DaemonProcess, ReplayError

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


class BenchError(RuntimeError):
    pass


@dataclass(frozen=True)
class IngestSettings:
    agents: int = 4
    seconds: float = 3.0
    window: int = 32
    rounds: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.agents <= 256:
            raise ValueError("--agents must be in 1..256")
        if not 0.2 <= self.seconds <= 600:
            raise ValueError("--seconds must be in 0.2..600")
        if not 1 <= self.window <= 500:
            raise ValueError("--window must be in 1..500")
        if not 1 <= self.rounds <= 10:
            raise ValueError("--rounds must be in 1..10")


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


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def _measure(
    s: IngestSettings, zctx: zmq.Context[Any], daemon: tuple[str, int], echo: tuple[str, int]
) -> dict[str, Any]:
    names = _seq()
    sample = DeltaStream().next_frame()
    rate = {"daemon": 0.0, "raw": 0.0}
    cpu = {"daemon": math.inf, "raw": math.inf, "client_raw": math.inf, "client_daemon": math.inf}
    busy = math.inf
    lat: dict[str, list[float]] = {"daemon": [], "raw": []}
    for _ in range(s.rounds):
        for kind in ("raw", "daemon"):
            endpoint, pid = echo if kind == "raw" else daemon
            agents = Agents(zctx, endpoint, s.agents)
            try:
                reply = b"DELTA" if kind == "raw" else b"SYNCED"
                if kind == "daemon":
                    agents.attach([f"bench-{os.getpid()}-{next(names)}" for _ in range(s.agents)], 10_000)
                    busy0, frames0 = daemon_busy(zctx, endpoint)
                cpu0, mine0 = cpu_seconds(pid), own_cpu()
                done, elapsed = agents.throughput(s.seconds, s.window, reply)
                cpu1, mine1 = cpu_seconds(pid), own_cpu()
                rate[kind] = max(rate[kind], done / elapsed)
                cpu[kind] = min(cpu[kind], (cpu1 - cpu0) / done)
                cpu[f"client_{kind}"] = min(cpu[f"client_{kind}"], (mine1 - mine0) / done)
                if kind == "daemon":
                    busy1, frames1 = daemon_busy(zctx, endpoint)
                    busy = min(busy, (busy1 - busy0) / max(1, frames1 - frames0 - 1))
                rtts = agents.latency(s.seconds, reply)
                if not lat[kind] or percentile(rtts, 50) < percentile(lat[kind], 50):
                    lat[kind] = rtts
            finally:
                agents.close()
    scale = {}
    for tokens in (10_000, 1_000_000):
        agents = Agents(zctx, daemon[0], 1)
        try:
            agents.attach([f"bench-{os.getpid()}-{next(names)}"], tokens)
            best = math.inf
            for _ in range(s.rounds):
                cpu0 = cpu_seconds(daemon[1])
                done, _elapsed = agents.throughput(s.seconds, s.window, b"SYNCED")
                best = min(best, (cpu_seconds(daemon[1]) - cpu0) / done)
        finally:
            agents.close()
        scale[tokens] = best * 1e6
    ratio = rate["daemon"] / rate["raw"] if rate["raw"] else 0.0
    cost_ratio = scale[1_000_000] / scale[10_000] if scale[10_000] else 0.0
    us = {k: round(v * 1e6, 2) for k, v in cpu.items()}
    return {
        "daemon_deltas_per_s": round(rate["daemon"]),
        "raw_pyzmq_msgs_per_s": round(rate["raw"]),
        "ratio_vs_raw": round(ratio, 3),
        "p50_ms": round(percentile(lat["daemon"], 50) * 1e3, 3),
        "p99_ms": round(percentile(lat["daemon"], 99) * 1e3, 3),
        "raw_p50_ms": round(percentile(lat["raw"], 50) * 1e3, 3),
        "raw_p99_ms": round(percentile(lat["raw"], 99) * 1e3, 3),
        "per_delta_cost_ratio_1m_vs_10k": round(cost_ratio, 3),
        "daemon_cpu_us_per_delta_10k": round(scale[10_000], 2),
        "daemon_cpu_us_per_delta_1m": round(scale[1_000_000], 2),
        "daemon_cpu_us_per_delta": us["daemon"],
        "raw_server_cpu_us_per_msg": us["raw"],
        "cpu_ratio_vs_raw": round(cpu["raw"] / cpu["daemon"], 3) if cpu["daemon"] else 0.0,
        "client_cpu_us_per_msg": {"raw": us["client_raw"], "daemon": us["client_daemon"]},
        "daemon_handle_us_per_delta": round(busy * 1e6, 2),
        "goals": {
            "ratio_vs_raw >= 0.5": ratio >= 0.5,
            "per_delta_cost_ratio_1m_vs_10k <= 1.5": cost_ratio <= 1.5,
        },
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
