"""Replay recorded agent trajectories through a real daemon over real ZeroMQ, and measure.

Each trajectory is played as an agent would: the sections of a turn arrive, then the agent's LLM
call needs its whole context to fit the budget. A turn that does not fit waits for compaction;
that wait is the stall the agent sees. Proposals are applied as they arrive, between turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ipc.client import AgentLink, LinkError
from summarizer.digest import approx_tokens
from watcher.paths import default_model_path
from watcher.trajectories import Trajectory, TrajectoryError, load_many


class ReplayError(RuntimeError):
    pass


@dataclass(frozen=True)
class ReplaySettings:
    paths: list[Path]
    budget: int = 32000
    reserve: float = 0.15
    turn_interval: float = 1.0
    connect: str | None = None
    config: str | None = None
    model: bool = True
    stall_timeout: float = 300.0
    policy: str = "optimistic"


@dataclass
class Run:
    name: str
    budget: int
    reserve: float
    usage: list[int] = field(default_factory=list)  # tokens at each LLM call
    stalls_ms: list[float] = field(default_factory=list)
    overflow_turns: int = 0
    compactions: int = 0
    stale: int = 0
    tokens_saved: int = 0
    invalidated: int = 0

    def metrics(self) -> dict[str, Any]:
        high = int(self.budget * (1 - self.reserve))
        turns = len(self.usage)
        return {
            "turns": turns,
            "budget_tokens": self.budget,
            "reserve_ratio": self.reserve,
            "peak_utilization": round(max(self.usage, default=0) / self.budget, 4),
            "turns_over_high_watermark": round(sum(u > high for u in self.usage) / turns, 4)
            if turns
            else 0.0,
            "overflow_turns": self.overflow_turns,
            "compactions": self.compactions,
            "stale_proposals": self.stale,
            "tokens_saved": self.tokens_saved,
            "cache_invalidated_tokens": self.invalidated,
            "stall_ms_total": round(sum(self.stalls_ms), 1),
            "stall_ms_p99": round(percentile(self.stalls_ms, 99), 1),
        }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def aggregate(runs: list[Run]) -> dict[str, Any]:
    if not runs:
        return {}
    ms = [r.metrics() for r in runs]
    turns = sum(m["turns"] for m in ms)
    stalls = [s for r in runs for s in r.stalls_ms]
    return {
        "trajectories": len(runs),
        "turns": turns,
        "budget_tokens": runs[0].budget,
        "reserve_ratio": runs[0].reserve,
        "peak_utilization": max(m["peak_utilization"] for m in ms),
        "turns_over_high_watermark": round(
            sum(m["turns_over_high_watermark"] * m["turns"] for m in ms) / turns, 4
        )
        if turns
        else 0.0,
        "overflow_turns": sum(m["overflow_turns"] for m in ms),
        "compactions": sum(m["compactions"] for m in ms),
        "stale_proposals": sum(m["stale_proposals"] for m in ms),
        "tokens_saved": sum(m["tokens_saved"] for m in ms),
        "cache_invalidated_tokens": sum(m["cache_invalidated_tokens"] for m in ms),
        "stall_ms_total": round(sum(stalls), 1),
        "stall_ms_p99": round(percentile(stalls, 99), 1),
    }


# --- the daemon under test ------------------------------------------------------------------------


class DaemonProcess:
    """A real `compactd run` subprocess on a private socket, stopped with SIGTERM."""

    def __init__(
        self, workdir: Path, config: str | None, model: bool, extra_args: tuple[str, ...] = ()
    ) -> None:
        self.endpoint = f"ipc://{workdir / 'agents.sock'}"
        self.log_path = workdir / "daemon.log"
        cmd = [
            sys.executable,
            "-m",
            "watcher",
            "run",
            "--socket",
            self.endpoint,
            "--state-dir",
            str(workdir / "state"),
        ]
        if config:
            cmd += ["--config", config]
        if not model:
            cmd.append("--no-model")
        cmd += extra_args
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)

    async def wait_ready(self, limit_s: float = 120.0) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ReplayError(f"daemon exited with {self.proc.returncode}: {self.log_tail()}")
            if b'"event": "ready"' in self.log_path.read_bytes():
                return
            await asyncio.sleep(0.1)
        raise ReplayError(f"daemon not ready after {limit_s:g} s: {self.log_tail()}")

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


# --- playing one trajectory -----------------------------------------------------------------------


async def play(endpoint: str, traj: Trajectory, s: ReplaySettings) -> Run:
    run = Run(traj.name, s.budget, s.reserve)
    changed = asyncio.Event()
    async with AgentLink(
        endpoint,
        agent=f"replay-{traj.name}-{os.getpid()}",
        budget=s.budget,
        reserve=s.reserve,
        session=s.policy,
    ) as link:

        async def applier() -> None:
            while True:
                p = await link.proposals.get()
                if await link.apply(p):
                    run.compactions += 1
                    run.tokens_saved += p.tokens_before - p.tokens_after
                    run.invalidated += p.invalidated_prefix_tokens
                else:
                    run.stale += 1
                changed.set()

        task = asyncio.create_task(applier(), name=f"applier-{traj.name}")
        try:
            for turn in traj.turns:
                await link.append(*turn, wait=True)
                t0 = time.perf_counter()
                waited = False
                deadline = time.monotonic() + s.stall_timeout
                while link.context.tokens > s.budget and time.monotonic() < deadline:
                    waited = True
                    changed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(changed.wait(), max(0.01, deadline - time.monotonic()))
                fits = link.context.tokens <= s.budget
                run.stalls_ms.append((time.perf_counter() - t0) * 1000 if waited else 0.0)
                if not fits:
                    run.overflow_turns += 1
                run.usage.append(link.context.tokens)
                await asyncio.sleep(s.turn_interval)  # the agent's own LLM call
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return run


def token_counter(model: bool) -> Callable[[str], int]:
    path = default_model_path()
    if model and path and Path(path).is_file():
        from summarizer.tokenizer import load_counter

        return load_counter(path)
    return approx_tokens


async def run_replay(s: ReplaySettings) -> dict[str, Any]:
    count = token_counter(s.model)
    try:
        trajs = load_many(s.paths, count=count)
    except TrajectoryError as exc:
        raise ReplayError(str(exc)) from exc
    with tempfile.TemporaryDirectory(prefix="compactd-replay-") as tmp:
        daemon = None if s.connect else DaemonProcess(Path(tmp), s.config, s.model)
        try:
            if daemon is not None:
                await daemon.wait_ready()
            endpoint = s.connect or (daemon.endpoint if daemon else "")
            runs = []
            for traj in trajs:
                try:
                    runs.append(await play(endpoint, traj, s))
                except LinkError as exc:
                    raise ReplayError(f"{traj.name}: {exc}") from exc
        finally:
            if daemon is not None:
                daemon.stop()
    return {
        "policies": {
            s.policy: {
                "aggregate": aggregate(runs),
                "trajectories": {r.name: r.metrics() for r in runs},
            }
        },
        "settings": {"budget": s.budget, "reserve": s.reserve, "turn_interval": s.turn_interval},
    }
