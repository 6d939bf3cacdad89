"""The agents of `compactd bench crash` (watcher.eval.bench.crash): settings, the tally of what was
found, and an agent that replays a trajectory and remembers every proposal it applied and every
checkpoint it saved (the truth the checks compare the daemon's store with)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ipc.client import AgentLink, LinkError
from ipc.protocol import Proposal
from ipc.sections import Section
from watcher.eval.bench.looped import looped_turns
from watcher.eval.scorecard import taken_out
from watcher.eval.trajectories import Trajectory

CHECKPOINT_EVERY: Final = 5  # turns


@dataclass(frozen=True)
class CrashSettings:
    cycles: int = 30
    agents: int = 3
    model: bool = True
    seed: int = 1
    budget: int = 6000
    reserve: float = 0.2
    turn_interval: float = 0.05
    trajectories: tuple[Path, ...] = ()
    workdir: Path | None = None
    run_s: tuple[float, float] = (0.3, 2.5)  # random kills land this long after the checks
    crash_wait_s: float = 20.0  # an armed crash point not reached by then: SIGKILL from outside
    resync_wait_s: float = 30.0


@dataclass
class Applied:
    proposal: Proposal
    originals: tuple[Section, ...]


@dataclass
class Tally:
    kills: Counter[str] = field(default_factory=Counter)
    kills_while_compacting: int = 0
    # distinct things found wrong (each is checked again after every restart, counted once)
    lost: set[tuple[str, str, str]] = field(default_factory=set)  # (agent, ref, section id)
    half: set[tuple[str, str]] = field(default_factory=set)  # (agent, proposal)
    lost_cps: set[tuple[str, str]] = field(default_factory=set)  # (agent, checkpoint)
    originals_checked: int = 0
    proposals_checked: int = 0
    mirror_mismatches: int = 0
    checkpoints_checked: int = 0
    integrity: list[bool] = field(default_factory=list)
    resynced: int = 0
    resync_expected: int = 0
    resync_s: list[float] = field(default_factory=list)
    cross_attempts: int = 0
    cross_refused: int = 0
    cross_leaks: list[str] = field(default_factory=list)
    settled: Counter[str] = field(default_factory=Counter)
    restores_ok: int = 0
    guardrails_ok: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(text)


# --- the agents --------------------------------------------------------------------------------------


class Agent:
    def __init__(self, name: str, token: str, endpoint: str, traj: Trajectory, s: CrashSettings) -> None:
        self.name = name
        self.token = token
        self.canary = f"canary-{name}-{secrets.token_hex(6)}"
        self.link = AgentLink(
            endpoint, agent=name, budget=s.budget, reserve=s.reserve, token=token, timeout_s=3.0
        )
        self.turns = looped_turns(name, traj)
        self.interval = s.turn_interval
        self.applied: dict[str, Applied] = {}
        self.checkpoints: dict[str, list[Section]] = {}
        self.errors: Counter[str] = Counter()
        self.turn = 0
        self._pause = asyncio.Event()
        self._resume = asyncio.Event()
        self._idle = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.link.connect()
        first = next(self.turns)
        marker = Section(f"{self.name}.canary", "user", f"Remember the code word {self.canary}.", tokens=12)
        await self.link.append(*first, marker, wait=True)
        self._task = asyncio.create_task(self._run(), name=f"crash-agent-{self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(LinkError):
            await self.link.close()

    async def pause(self) -> None:
        self._idle.clear()
        self._resume.clear()
        self._pause.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), 10.0)

    def resume(self) -> None:
        self._pause.clear()
        self._resume.set()

    async def _run(self) -> None:
        while True:
            if self._pause.is_set():
                self._idle.set()
                await self._resume.wait()
                continue
            await self._step()

    async def _step(self) -> None:
        await self.apply_queued()
        try:
            await self.link.append(*next(self.turns), wait=True)
        except LinkError as exc:
            self.errors[exc.code] += 1
            await asyncio.sleep(0.1)
        self.turn += 1
        if self.turn % CHECKPOINT_EVERY == 0:
            name = f"{self.name}-cp{self.turn}"
            try:
                await self.link.checkpoint(name)
                self.checkpoints[name] = list(self.link.context)
            except LinkError as exc:
                self.errors[f"checkpoint:{exc.code}"] += 1
        await asyncio.sleep(self.interval)

    async def apply_queued(self) -> None:
        while not self.link.proposals.empty():
            p = self.link.proposals.get_nowait()
            originals = taken_out(p, [self.link.context.get(i) for i in p.replaces])
            try:
                ok = await self.link.apply(p)
            except LinkError as exc:
                self.errors[f"apply:{exc.code}"] += 1
                continue
            if ok:
                self.applied[p.proposal] = Applied(p, originals)
