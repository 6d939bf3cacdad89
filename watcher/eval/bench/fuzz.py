"""`compactd bench fuzz`: throw malformed frames at a running daemon and account for every one.

A real `compactd run` subprocess (max frame 64 KiB, no model unless asked) is attacked by several
DEALER peers at once, each in lock-step (one frame, then its answer), with frames of these kinds:

* ``random``    random bytes, 0-512 of them
* ``truncated`` a valid message's msgpack cut short
* ``types``     a valid message with one field of a wrong type or out of range (wrong ids included)
* ``lengths``   msgpack headers declaring huge strings, arrays, maps, binaries; deep nesting
* ``version``   wrong, missing or mistyped protocol versions
* ``unknown``   unknown or mistyped message types
* ``dupids``    duplicate section ids inside one SNAPSHOT or DELTA
* ``multipart`` more than one ZeroMQ frame per message
* ``sequence``  (attached, synced peers) deltas out of order and appends of ids already present;
                each must be answered with RESYNC, after which the peer resyncs with a SNAPSHOT
* ``oversize``  frames over the size limit: libzmq drops them (ZMQ_MAXMSGSIZE) and the connection
                with them; no answer may come and the daemon must never see them

Every other frame must get exactly one ERROR. Meanwhile well-behaved agents keep streaming and
must keep getting (and applying) proposals. At the end the daemon must still answer, stop cleanly
with exit code 0, and its own counters (frames handled, errors sent) must match the tally.
"""

from __future__ import annotations

import asyncio
import random
import struct
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import zmq
import zmq.asyncio

from ipc.client import AgentLink, LinkError
from ipc.protocol import decode, encode
from ipc.sections import Section
from watcher.eval.bench.fuzzframes import KINDS, MAKERS, sec
from watcher.eval.bench.goals import BenchError, Goal, in_range, judge
from watcher.eval.bench.procstat import rss_mb
from watcher.eval.harness import DaemonProcess, ReplayError
from watcher.eval.scorecard import percentile

MAX_FRAME: Final = 65536
REPLY_TIMEOUT_S: Final = 10.0
SILENCE_S: Final = 0.15  # how long an oversize frame's peer listens for an answer that must not come


@dataclass(frozen=True)
class FuzzSettings:
    frames: int = 100_000
    peers: int = 6
    seed: int = 1
    model: bool = False
    oversize_every: int = 400  # one oversize frame per this many frames
    good_agents: int = 2

    def __post_init__(self) -> None:
        in_range(frames=(self.frames, 10, 10_000_000), peers=(self.peers, 1, 64))


@dataclass
class Tally:
    sent: Counter[str] = field(default_factory=Counter)  # malformed frames by kind
    errors: Counter[str] = field(default_factory=Counter)  # ERROR replies by code
    resyncs: int = 0
    unanswered: Counter[str] = field(default_factory=Counter)  # kind -> frames without an answer
    wrong_answer: Counter[str] = field(default_factory=Counter)  # kind:reply type
    oversize_answered: int = 0
    valid_frames: int = 0  # HELLO, resync SNAPSHOTs, STATUS: not counted as malformed
    samples: dict[str, str] = field(default_factory=dict)  # one ERROR message per code


# --- the attackers ------------------------------------------------------------------------------------


class Budget:
    """The shared count of malformed frames still to send."""

    def __init__(self, total: int) -> None:
        self.left = total

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


async def _answer(sock: zmq.asyncio.Socket, within_s: float) -> dict[str, Any] | None:
    """The next frame the peer receives, or None if nothing comes within ``within_s``."""
    try:
        frame = await asyncio.wait_for(sock.recv(), within_s)
    except TimeoutError:
        return None
    return decode(frame, 1 << 30)


def _dealer(ctx: zmq.asyncio.Context, endpoint: str) -> zmq.asyncio.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


async def stateless_peer(
    ctx: zmq.asyncio.Context, endpoint: str, n: int, rng: random.Random, budget: Budget, tally: Tally
) -> None:
    sock = _dealer(ctx, endpoint)
    try:
        hello = {"t": "HELLO", "id": 1, "agent": f"fuzz-peer-{n}", "budget": 4000, "policy": "off"}
        await sock.send(encode(hello))
        tally.valid_frames += 1
        if (await _answer(sock, REPLY_TIMEOUT_S) or {}).get("t") != "WELCOME":
            raise BenchError(f"fuzz peer {n} could not attach")
        while budget.take():
            kind = rng.choice(KINDS)
            tally.sent[kind] += 1
            if kind == "multipart":
                await sock.send_multipart(
                    [MAKERS[rng.choice(KINDS[:-1])](rng) for _ in range(rng.randint(2, 3))]
                )
            else:
                await sock.send(MAKERS[kind](rng))
            reply = await _answer(sock, REPLY_TIMEOUT_S)
            if reply is None:
                tally.unanswered[kind] += 1
            elif reply.get("t") == "ERROR":
                code = str(reply.get("code"))
                tally.errors[code] += 1
                tally.samples.setdefault(code, str(reply.get("message"))[:200])
            else:
                tally.wrong_answer[f"{kind}:{reply.get('t')}"] += 1
    finally:
        sock.close(0)


async def sequence_peer(
    ctx: zmq.asyncio.Context, endpoint: str, n: int, rng: random.Random, budget: Budget, tally: Tally
) -> None:
    """Attached and synced; sends deltas out of order and duplicate appends, expects RESYNC each time."""
    sock = _dealer(ctx, endpoint)
    ids = iter(range(2, 1 << 62))
    version = 1
    present = [sec("k1", "kept"), sec("k2", "kept too")]

    async def ask(msg: dict[str, Any]) -> dict[str, Any] | None:
        msg["id"] = next(ids)
        await sock.send(encode(msg))
        return await _answer(sock, REPLY_TIMEOUT_S)

    try:
        tally.valid_frames += 2
        hello = {"t": "HELLO", "agent": f"fuzz-seq-{n}", "budget": 4000, "policy": "off"}
        if (await ask(hello) or {}).get("t") != "WELCOME":
            raise BenchError(f"sequence peer {n} could not attach")
        if (await ask({"t": "SNAPSHOT", "version": version, "sections": present}) or {}).get("t") != "SYNCED":
            raise BenchError(f"sequence peer {n} could not sync")
        while budget.take():
            tally.sent["sequence"] += 1
            if rng.random() < 0.5:
                base = rng.choice([version + 1, version + 7, version + (1 << 40), max(0, version - 1)])
                msg = {"t": "DELTA", "base": base, "ops": [{"op": "append", "sections": [sec("new")]}]}
            else:  # appending an id the mirror already holds
                msg = {"t": "DELTA", "base": version, "ops": [{"op": "append", "sections": [sec("k1")]}]}
            reply = await ask(msg)
            if reply is None:
                tally.unanswered["sequence"] += 1
                continue
            if reply.get("t") != "RESYNC":
                tally.wrong_answer[f"sequence:{reply.get('t')}"] += 1
                continue
            tally.resyncs += 1
            version += 1
            tally.valid_frames += 1
            again = await ask({"t": "SNAPSHOT", "version": version, "sections": present})
            if (again or {}).get("t") != "SYNCED":
                raise BenchError(f"sequence peer {n}: resync SNAPSHOT answered {again}")
    finally:
        sock.close(0)


async def oversize_peer(
    ctx: zmq.asyncio.Context, endpoint: str, count: int, rng: random.Random, tally: Tally
) -> None:
    """Frames over the limit: dropped by libzmq with the connection; nothing may answer them."""
    for _ in range(count):
        sock = _dealer(ctx, endpoint)  # a fresh connection each time: the old one is cut
        try:
            size = rng.choice([MAX_FRAME + 2048, 2 * MAX_FRAME, 1 << 20])
            head = b"\x82\xa1v\x01\xa1t\xa4DELTA" + b"\xdb" + struct.pack(">I", size)
            await sock.send(head + rng.randbytes(size - len(head)))
            tally.sent["oversize"] += 1
            if await _answer(sock, SILENCE_S) is not None:
                tally.oversize_answered += 1
        finally:
            sock.close(0)


@dataclass
class Good:
    proposals: int = 0
    appends: int = 0
    latency_ms: list[float] = field(default_factory=list)
    errors: int = 0


async def good_agent(endpoint: str, n: int, stop: asyncio.Event, good: Good) -> None:
    """A well-behaved agent streaming tool output; counts the proposals it gets while the fuzz runs."""
    async with AgentLink(endpoint, agent=f"good-{n}", budget=4000, timeout_s=REPLY_TIMEOUT_S) as link:
        i = 0
        while not stop.is_set():
            text = "".join(f"line {i}.{j}: status=ok value={i * 31 + j}\n" for j in range(20))
            t0 = time.perf_counter()
            try:
                await link.append(Section(f"g{n}-{i}", "tool_result", text, tokens=len(text) // 3), wait=True)
            except LinkError:
                good.errors += 1
            good.latency_ms.append((time.perf_counter() - t0) * 1000)
            good.appends += 1
            i += 1
            while not link.proposals.empty():
                if await link.apply(link.proposals.get_nowait()):
                    good.proposals += 1
            await asyncio.sleep(0.05)


# --- the run ---------------------------------------------------------------------------------------


async def daemon_counters(ctx: zmq.asyncio.Context, endpoint: str) -> dict[str, Any]:
    sock = _dealer(ctx, endpoint)
    try:
        await sock.send(encode({"t": "STATUS", "id": 1}))
        reply = await _answer(sock, REPLY_TIMEOUT_S)
    finally:
        sock.close(0)
    if reply is None or reply.get("t") != "STATE":
        raise BenchError(f"the daemon did not answer STATUS: {reply}")
    daemon: dict[str, Any] = reply["daemon"]
    return daemon


async def run_fuzz(s: FuzzSettings) -> dict[str, Any]:
    rng = random.Random(s.seed)
    tally = Tally()
    good = Good()
    with tempfile.TemporaryDirectory(prefix="compactd-fuzz-") as tmp:
        work = Path(tmp)
        cfg = work / "fuzz.toml"
        cfg.write_text(f"[daemon]\nmax_frame_bytes = {MAX_FRAME}\n")
        daemon = DaemonProcess(work, str(cfg), s.model)
        ctx = zmq.asyncio.Context()
        try:
            await daemon.wait_ready(120)
            before = await daemon_counters(ctx, daemon.endpoint)
            rss0 = rss_mb(daemon.proc.pid)
            stop = asyncio.Event()
            goods = [
                asyncio.create_task(good_agent(daemon.endpoint, n, stop, good)) for n in range(s.good_agents)
            ]
            await asyncio.sleep(0.5)
            t0 = time.perf_counter()
            oversize = s.frames // s.oversize_every
            budget = Budget(s.frames - oversize)
            n_seq = max(1, s.peers // 3)
            peers = [
                stateless_peer(ctx, daemon.endpoint, n, random.Random(rng.random()), budget, tally)
                for n in range(s.peers)
            ] + [
                sequence_peer(ctx, daemon.endpoint, n, random.Random(rng.random()), budget, tally)
                for n in range(n_seq)
            ]
            peers.append(oversize_peer(ctx, daemon.endpoint, oversize, random.Random(rng.random()), tally))
            await asyncio.gather(*peers)
            elapsed = time.perf_counter() - t0
            stop.set()
            await asyncio.gather(*goods)
            after = await daemon_counters(ctx, daemon.endpoint)
            rss1 = rss_mb(daemon.proc.pid)
            alive = daemon.proc.poll() is None
        except ReplayError as exc:
            raise BenchError(str(exc)) from exc
        finally:
            ctx.destroy(0)
            code = daemon.stop()
        log_text = daemon.log_path.read_text(errors="replace")
    return _result(s, tally, good, before, after, elapsed, alive, code, log_text, rss0, rss1)


def _result(
    s: FuzzSettings,
    tally: Tally,
    good: Good,
    before: dict[str, Any],
    after: dict[str, Any],
    elapsed: float,
    alive: bool,
    exit_code: int,
    log_text: str,
    rss0: float,
    rss1: float,
) -> dict[str, Any]:
    malformed = sum(tally.sent.values())
    errors_sent = sum(tally.errors.values())
    unanswered = sum(tally.unanswered.values())
    wrong = sum(tally.wrong_answer.values())
    err_delta = sum(after["errors"].values()) - sum(before["errors"].values())
    crashes = 0 if alive and exit_code == 0 else 1
    internal = log_text.count('"event": "internal_error"')
    good_appends = max(1, good.appends)
    result = {
        "frames_malformed": malformed,
        "frames_by_kind": dict(sorted(tally.sent.items())),
        "answered_error": errors_sent,
        "answered_resync": tally.resyncs,
        "dropped_oversize": tally.sent["oversize"] - tally.oversize_answered,
        "oversize_answered": tally.oversize_answered,
        "unanswered": unanswered,
        "unanswered_by_kind": dict(tally.unanswered),
        "wrong_answers": dict(tally.wrong_answer),
        "errors_by_code": dict(sorted(tally.errors.items())),
        "error_samples": tally.samples,
        "daemon_errors_counted": err_delta,
        "counters_match": err_delta == errors_sent + good.errors,
        "daemon_frames_counted": after["frames"] - before["frames"],
        "valid_frames": tally.valid_frames,
        "internal_errors": internal,
        "crashes": crashes,
        "daemon_exit_code": exit_code,
        "seconds": round(elapsed, 1),
        "frames_per_s": round(malformed / elapsed, 1) if elapsed else 0.0,
        "daemon_rss_mb_before": rss0,
        "daemon_rss_mb_after": rss1,
        "good_agents": s.good_agents,
        "good_appends": good.appends,
        "good_proposals_applied": good.proposals,
        "good_errors": good.errors,
        "good_append_ms_p50": round(percentile(good.latency_ms, 50), 2),
        "good_append_ms_p99": round(percentile(good.latency_ms, 99), 2),
        "settings": {"frames": s.frames, "peers": s.peers, "seed": s.seed, "model": s.model},
    }
    return judge(
        result,
        [
            Goal("frames_malformed", malformed, ">=", s.frames),
            Goal("crashes", crashes, "==", 0),
            Goal("unanswered", unanswered, "==", 0),
            Goal("wrong_answers", wrong, "==", 0),
            Goal("oversize_answered", tally.oversize_answered, "==", 0),
            Goal("internal_errors", internal, "==", 0),
            Goal("good_proposals_applied", good.proposals, ">=", 1),
            Goal("counters_match", err_delta == errors_sent + good.errors, "==", True),
            Goal("good_error_ratio", round(good.errors / good_appends, 4), "<", 0.01),
        ],
    )
