"""Sampling a daemon under test from outside: RSS and CPU from /proc, and its STATUS.

Shared by the benches (load, load with trajectories, fuzz, ingest).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import zmq
import zmq.asyncio

from ipc.protocol import decode, encode
from watcher.eval.harness import DaemonProcess

CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
NO_AGENT: Final = "load-status-probe"  # a STATUS naming it gets the daemon's figures, no agent's


def rss_mb(pid: int) -> float:
    """Resident memory of one process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _mb(nbytes: Any) -> float | None:
    return round(nbytes / 1048576, 1) if isinstance(nbytes, int) else None


def pss_mb(pid: int) -> float:
    """Proportional set size of one process, MiB: its private pages plus its share of each page it
    shares (libpython, libllama and the other mapped files the daemon and its worker both hold).
    Summed over a process tree it counts every page once, as RSS summed over it does not."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_times() -> tuple[int, int]:
    """(all, steal) clock ticks of the machine's CPUs since boot (/proc/stat's first line). Steal is
    the time this virtual machine's CPUs were runnable but the host ran something else: a step that
    slows while its processes do less work (stop 51's 78.8 ms ingest p99) shows it here."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields[:8]), (fields[7] if len(fields) > 7 else 0)


def steal_pct(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Steal's share of the CPUs' time between two cpu_times() readings, in percent."""
    total = after[0] - before[0]
    return round(100 * (after[1] - before[1]) / total, 1) if total > 0 else None


@dataclass(frozen=True)
class TreeUsage:
    rss_mb: float  # VmRSS summed over the process and its children (shared pages counted in each)
    pss_mb: float  # PSS summed over them: the memory the tree holds, each page once
    cpu_s: float  # CPU seconds of the process
    children_cpu_s: float  # ... of its children (the digest worker)


def proc_split(pid: int) -> TreeUsage:
    """Memory and CPU of a daemon and its children (the digest worker; before stop 31, also
    multiprocessing's resource tracker)."""
    rss = pss = 0.0
    cpu = [0.0, 0.0]
    for n, p in enumerate([pid, *_children(pid)]):
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1]) / 1024
            pss += pss_mb(p)
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            cpu[min(n, 1)] += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return TreeUsage(rss, pss, cpu[0], cpu[1])


async def ask_status(
    ctx: zmq.asyncio.Context, endpoint: str, within_s: float = 5.0, agents: bool = True
) -> dict[str, Any] | None:
    """The operator's STATUS; ``agents=False``: the daemon's part only (it names an agent that is
    not attached), which costs the daemon no per-agent work: the once-a-second sample must not add
    to the ingest latency it measures."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    msg: dict[str, Any] = {"t": "STATUS", "id": 1}
    if not agents:
        msg["agent"] = NO_AGENT
    try:
        await sock.send(encode(msg))
        frame = await asyncio.wait_for(sock.recv(), within_s)
        reply = decode(frame, 1 << 30)
        return reply if reply.get("t") == "STATE" else None
    except TimeoutError:
        return None
    finally:
        sock.close(0)


async def loop_lag(lags: list[float]) -> None:
    """How late this process's own event loop wakes up (a client that cannot keep up would inflate
    the measured ingest latency; this says by how much)."""
    while True:
        t0 = time.perf_counter()
        await asyncio.sleep(0.01)
        lags.append((time.perf_counter() - t0 - 0.01) * 1000)


@dataclass
class Sampler:
    curve: list[dict[str, Any]] = field(default_factory=list)
    queue: dict[str, Any] = field(default_factory=dict)  # the last compaction_queue stats seen

    async def run(self, ctx: zmq.asyncio.Context, holder: dict[str, DaemonProcess], start: float) -> None:
        last_cpu: tuple[float, float, float, float] | None = None  # (when, daemon, worker, client)
        ticks = cpu_times()
        while True:
            await asyncio.sleep(1.0)
            ticks, before = cpu_times(), ticks
            stolen = steal_pct(before, ticks)
            daemon = holder["daemon"]
            t = round(time.monotonic() - start, 1)
            try:
                usage = proc_split(daemon.proc.pid)
            except (OSError, ValueError, IndexError):
                self.curve.append({"t": t, "rss_mb": None, "pss_mb": None, "steal_pct": stolen})
                last_cpu = None
                continue
            main, worker = usage.cpu_s, usage.children_cpu_s
            now = time.monotonic()
            client = time.process_time()
            cpu_pct = worker_pct = client_pct = None
            if last_cpu:
                span = (now - last_cpu[0]) / 100
                cpu_pct = round((main + worker - last_cpu[1] - last_cpu[2]) / span, 1)
                worker_pct = round((worker - last_cpu[2]) / span, 1)
                client_pct = round((client - last_cpu[3]) / span, 1)
            last_cpu = (now, main, worker, client)
            status = await ask_status(ctx, daemon.endpoint, 2.0, agents=False)
            q = (status or {}).get("daemon", {}).get("compaction_queue") or {}
            if q:
                self.queue = q
            self.curve.append(
                {
                    "t": t,
                    "rss_mb": round(usage.rss_mb, 1),  # the daemon and its worker, summed
                    "pss_mb": round(usage.pss_mb, 1),  # the same, each shared page counted once
                    "cpu_pct": cpu_pct,  # the daemon and its digest worker
                    "worker_cpu_pct": worker_pct,
                    "client_cpu_pct": client_pct,  # this process: the 200 agents
                    "loadavg": round(os.getloadavg()[0], 2),
                    "steal_pct": stolen,  # of the machine's CPU time in the last second (cpu_times)
                    "queue_depth": q.get("depth"),
                    "served": q.get("served"),
                    "agents": (status or {}).get("daemon", {}).get("agents"),
                    "mirrors_mb": _mb((status or {}).get("daemon", {}).get("mirror_bytes")),
                }
            )
