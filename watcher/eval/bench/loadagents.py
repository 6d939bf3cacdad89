"""One step of `compactd bench load --trajectories`: N agents replaying real trajectories at once.

Each agent is a real :class:`ipc.client.AgentLink` replaying one recorded trajectory
(:mod:`watcher.eval.trajectories`; agent *i* plays trajectory *i mod T*, looped with unique ids so
it never runs out). It behaves like replay's optimistic agent (:mod:`watcher.eval.replay`): a turn's
sections arrive (the round trip of that append is the ingest latency), then its LLM call needs the
whole context to fit the budget. A call that does not fit waits for compaction (a *stall*); one
that still does not fit after ``stall_timeout`` (or when the daemon has nothing left to fold) is
an *overflow*. Proposals are applied as they arrive. After the call the agent "thinks" for its own
interval, drawn once per agent from ``interval`` (seeded), then its next turn arrives.

Where an agent starts: it first appends the turns of its trajectory up to a fill of its high
watermark drawn per agent from ``START_FILL`` (turn 0, the prompt and task, always), one append per
turn, back to back (``attach="appends"``, as an agent replaying its session does), or all in one
SNAPSHOT (``attach="snapshot"``, as the proxy sends a conversation it first sees mid-session). So the agents
start at staggered points and most of them cross their watermarks within a bounded run (with a
24k budget the high watermark is 20.4k tokens; from 50-95 % of it, the median turn of these
trajectories, ~350 tokens, and one turn every 6 s on average, most agents reach it in one or two
minutes), and they do not cross it in lock-step.

A call whose turn alone holds more tokens than the budget minus the low watermark (a single tool
output bigger than what a context freshly compacted to its low watermark can take) cannot be made
to fit by any compaction scheduled ahead; its stall or overflow is counted apart
(``*_oversized_turn``) and not in ``stalled_calls`` / ``overflow_calls``, which measure load.

Every other stall is kept with what the agent saw (:class:`Stall`): the turn's tokens, the context
before the turn, and a cause (:func:`stall_cause`): ``behind`` (the context was over its high
watermark before the turn, in the agent's reserve: a compaction the daemon owed it had not landed;
from where the daemon plans, under its high watermark, a turn that is not oversized fits), else
``turn_over_headroom`` (the context was at or under its high watermark and the turn did not fit:
only a plan made earlier, for a turn larger than the agent's recent ones, would have taken it),
else ``other``. The knee counts every such stall; the causes say whether the daemon's timeliness
(``behind``) or its plan (``turn_over_headroom``) failed the call. From ccfd39c (stop 39) until
stop 40 a stall in the reserve whose turn would not have fit at the high watermark either was
``turn_over_headroom``: most of those went when the scheduler's order kept the reserve
(docs/BENCHMARKS.md, "Stop 40").
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import zmq.asyncio

from ipc.client import AgentLink, LinkError
from ipc.protocol import Proposal
from ipc.sections import Section
from watcher.eval.bench.looped import looped_turns
from watcher.eval.replay import wait_for_room
from watcher.eval.trajectories import Trajectory

START_FILL: Final = (0.5, 0.95)  # of the high watermark, drawn per agent
ATTACH: Final = ("appends", "snapshot")  # how an agent sends its history at the start
LINK_TIMEOUT_S: Final = 30.0  # a large turn on a busy daemon: the append waits this long at most


@dataclass(frozen=True)
class AgentPlan:
    name: str
    traj: Trajectory
    interval: float  # seconds of the agent's own LLM time per turn
    fill: float  # where it starts, as a share of its high watermark
    first_turn_s: float  # when its first timed turn arrives, after the start


STALL_CAUSES: Final = ("behind", "turn_over_headroom", "other")


def stall_cause(before: int, turn: int, high: int, budget: int) -> str:
    """Why a call stalled (see the module's doc): the context held ``before`` tokens before a turn
    of ``turn`` tokens, with the agent's ``high`` watermark and ``budget``."""
    if before > high:
        return "behind"
    if before + turn > budget:
        return "turn_over_headroom"
    return "other"


@dataclass(frozen=True)
class Stall:
    """One stalled call (not an oversized turn's)."""

    ms: float
    turn_tokens: int
    before_tokens: int  # the context before the turn arrived
    cause: str


@dataclass
class AgentTally:
    """What one agent saw during the step."""

    high: int = 0
    low: int = 0
    calls: int = 0
    stalls_ms: list[float] = field(default_factory=list)  # per call, 0 when it fit at once
    stalled: int = 0
    stalls: list[Stall] = field(default_factory=list)  # the stalled calls counted in `stalled`
    overflows: int = 0
    stalled_oversized: int = 0
    overflows_oversized: int = 0
    over_high: int = 0  # calls with the context above the high watermark
    peak: int = 0
    ingest_ms: list[float] = field(default_factory=list)
    slowest: tuple[float, int] = (0.0, 0)  # the slowest append: (ms, tokens of the turn)
    errors: int = 0
    compactions: int = 0
    stale: int = 0
    tokens_compacted: int = 0  # tokens of the sections the applied proposals replaced
    tokens_saved: int = 0
    model_digests: int = 0  # applied proposals whose digest the model wrote
    start_tokens: int = 0


def plans(trajs: list[Trajectory], n: int, interval: tuple[float, float], seed: int) -> list[AgentPlan]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        gap = rng.uniform(*interval)
        out.append(
            AgentPlan(
                f"load-{i:04d}", trajs[i % len(trajs)], gap, rng.uniform(*START_FILL), rng.random() * gap
            )
        )
    return out


class LoadAgent:
    def __init__(
        self, plan: AgentPlan, endpoint: str, budget: int, ctx: zmq.asyncio.Context, attach: str = "appends"
    ) -> None:
        self.plan = plan
        self.budget = budget
        self.attach = attach
        self.link = AgentLink(
            endpoint, agent=plan.name, budget=budget, timeout_s=LINK_TIMEOUT_S, zmq_context=ctx
        )
        self.turns: Iterator[list[Section]] = looped_turns(plan.name, plan.traj)
        self.tally = AgentTally()
        self.changed = asyncio.Event()
        self._applier: asyncio.Task[None] | None = None
        self._pending: list[Section] = []  # the first timed turn, drawn in start()

    async def start(self) -> None:
        """Attach, and send the turns up to this agent's starting fill (untimed): one append per
        turn, or one SNAPSHOT of them all (``attach``)."""
        welcome = await self.link.connect()
        t = self.tally
        t.high, t.low = int(welcome.get("high_watermark", 0)), int(welcome.get("low_watermark", 0))
        target = self.plan.fill * (t.high or self.budget)
        history: list[Section] = []
        tokens = 0
        while True:
            turn = next(self.turns)
            size = sum(s.tokens for s in turn)
            if history and tokens + size > target:
                self._pending = turn  # the first timed turn
                break
            if self.attach == "appends":
                await self.link.append(*turn, wait=True)
            history += turn
            tokens += size
        if self.attach == "snapshot":
            await self.link.snapshot(history)
        t.start_tokens = self.link.context.tokens
        self._applier = asyncio.create_task(self._apply_forever(), name=f"applier-{self.plan.name}")

    async def _apply_forever(self) -> None:
        while True:
            p = await self.link.proposals.get()
            await self._apply(p)
            self.changed.set()

    async def _apply(self, p: Proposal) -> None:
        t = self.tally
        replaced = [s for i in p.replaces if (s := self.link.context.get(i)) is not None]
        try:
            ok = await self.link.apply(p)
        except LinkError:
            t.errors += 1
            return
        if not ok:
            t.stale += 1
            return
        t.compactions += 1
        before = sum(s.tokens for s in replaced)
        t.tokens_compacted += before
        t.tokens_saved += before - sum(s.tokens for s in p.digest)
        t.model_digests += any(s.meta.get("method") == "model" for s in p.digest)

    async def run(self, start: float, end: float, stall_timeout: float) -> None:
        """Turns until ``end`` (monotonic): append, the LLM call (stall / overflow), think."""
        t = self.tally
        await asyncio.sleep(max(0.0, start + self.plan.first_turn_s - time.monotonic()))
        turn = self._pending
        while time.monotonic() < end:
            before, size = self.link.context.tokens, sum(s.tokens for s in turn)
            t0 = time.perf_counter()
            try:
                await self.link.append(*turn, wait=True)
                ms = (time.perf_counter() - t0) * 1000
                t.ingest_ms.append(ms)
                t.slowest = max(t.slowest, (round(ms, 1), size))
            except LinkError:
                t.errors += 1
            oversized = size > self.budget - t.low
            stall, fits = await wait_for_room(self.link, self.changed, self.budget, stall_timeout)
            tokens = self.link.context.tokens
            t.calls += 1
            t.stalls_ms.append(0.0 if oversized else stall)
            if stall > 0:
                t.stalled_oversized += oversized
                t.stalled += not oversized
                if not oversized:
                    cause = stall_cause(before, size, t.high, self.budget)
                    t.stalls.append(Stall(round(stall, 1), size, before, cause))
            if not fits:
                t.overflows_oversized += oversized
                t.overflows += not oversized
            t.over_high += tokens > t.high
            t.peak = max(t.peak, tokens)
            await asyncio.sleep(self.plan.interval)  # the agent's own LLM call
            turn = next(self.turns)

    async def close(self) -> None:
        if self._applier is not None:
            self._applier.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._applier
        with contextlib.suppress(Exception):
            await self.link.close(bye=False)
