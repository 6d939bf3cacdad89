"""Replay recorded agent trajectories through a real daemon over real ZeroMQ, and measure.

Each trajectory is played as an agent would: the sections of a turn arrive, then the agent's LLM
call needs its whole context to fit the budget. The last turn (the final step and its output, such
as mini-swe-agent's submitted diff) arrives but is never sent to a model, as in the recorded run:
a trajectory of T turns makes T - 1 LLM calls, and ``turns`` in the results counts those calls. A
turn that does not fit waits for compaction; that wait is the stall the agent sees. Proposals are
applied as they arrive, between turns.

Several policies are compared in one run (``--policy optimistic,reactive,masking,recency``). Each
policy has a daemon of its own (same config, same model), started at the beginning, so the
summarizer's state (a back-off after a model timeout, its KV cache, its counters) and the archive
never leak from one policy into another. Trajectories are played one at a time, each under every
policy in turn (the order rotates from one trajectory to the next), with agents of their own:

* one at a time, not concurrently (unless ``--jobs N``): the summarizer has one inference thread
  per daemon and the machine has few cores, so agents played together wait for each other's
  digests, and the stalls measure that contention as well as the policy (``--jobs`` trades that
  for wall time: N trajectories at once, each still playing its policies one after another);
* interleaved by trajectory, not policy after policy: on a shared machine the load drifts over a
  run of hours, and a policy played in a busy hour would look slower for that alone.

The price is wall time (turns x interval x policies).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from ipc.client import AgentLink, LinkError
from ipc.sections import Section
from summarizer.digest import approx_tokens
from watcher.eval.canaries import Canary, CanaryError, load_canaries, plant, score
from watcher.eval.harness import ReplayError, running_daemon
from watcher.eval.nfr import retention
from watcher.eval.progress import Progress
from watcher.eval.regret import regret
from watcher.eval.scorecard import EngineWork, Run, aggregate, percentile, spread
from watcher.eval.trajectories import Trajectory, TrajectoryError, load_many
from watcher.runtime.paths import default_model_path

__all__ = ["POLICIES", "ReplayError", "ReplaySettings", "Run", "aggregate", "percentile"]

POLICIES: Final = ("optimistic", "recency", "reactive", "masking")
STUCK_POLL_S: Final = 1.0  # while stalled, ask the daemon this often whether anything is coming
SETTLE_S: Final = 120.0  # after the last turn, wait at most this long for a running digest job


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
    policies: tuple[str, ...] = ("optimistic",)
    canaries: Path | None = None
    seed: int = 0
    progress: bool | None = None  # None: a progress bar when stderr is a terminal
    partial_json: Path | None = None  # rewritten after each trajectory with the results so far
    jobs: int = 1  # trajectories played at once (each plays its policies one after another)
    rounds: int = 1  # the whole set this many times (round r > 1: names end in "#r"); ratios per round

    @property
    def policy(self) -> str:
        return self.policies[0]


def parse_policies(text: str) -> tuple[str, ...]:
    """``"optimistic,reactive"`` -> ("optimistic", "reactive"); ReplayError names a bad one."""
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [p for p in names if p not in POLICIES]
    if bad or not names:
        raise ReplayError(f"unknown policy {', '.join(bad) or repr(text)}: choose from {', '.join(POLICIES)}")
    if len(set(names)) != len(names):
        raise ReplayError(f"policy listed twice in {text!r}")
    return names


# --- playing one trajectory -----------------------------------------------------------------------


async def _daemon_busy(link: AgentLink) -> bool:
    """Is a digest job running or a proposal pending for this agent (so waiting is worth it)?"""
    status = await link.status()
    agents = status.get("agents") or [{}]
    me = agents[0]
    return bool(me.get("compacting")) or int(me.get("pending_proposals", 0)) > 0


async def _engine(link: AgentLink) -> tuple[EngineWork, dict[str, int]]:
    """The summarizer's work so far, and why jobs skipped the model (daemon-wide counters)."""
    daemon = (await link.status()).get("daemon") or {}
    skipped = (daemon.get("digest_methods") or {}).get("model_skipped") or {}
    return EngineWork.from_stats(daemon.get("summarizer")), {str(k): int(v) for k, v in skipped.items()}


async def play(
    endpoint: str,
    traj: Trajectory,
    s: ReplaySettings,
    policy: str | None = None,
    canaries: Sequence[Canary] = (),
    progress: Progress | None = None,
) -> Run:
    policy = policy or s.policy
    run = Run(traj.name, s.budget, s.reserve, policy)
    changed = asyncio.Event()
    async with AgentLink(
        endpoint,
        agent=f"replay-{policy}-{traj.name}-{os.getpid()}"[:128],
        budget=s.budget,
        reserve=s.reserve,
        session=policy,
        planner=policy,
    ) as link:
        run.high = int(link.welcome.get("high_watermark", 0))
        run.low = int(link.welcome.get("low_watermark", 0))
        engine_before, skipped_before = await _engine(link)

        async def applier() -> None:
            while True:
                p = await link.proposals.get()
                before = [link.context.get(i) for i in p.replaces]
                if await link.apply(p):
                    run.applied(p, before)
                else:
                    run.stale += 1
                changed.set()

        task = asyncio.create_task(applier(), name=f"applier-{traj.name}")
        try:
            for k, turn in enumerate(traj.turns):
                await link.append(*turn, wait=True)
                if k == len(traj.turns) - 1 and k > 0:
                    break  # the run's last step and its output: no LLM call follows it
                stall, fits = await wait_for_room(link, changed, s.budget, s.stall_timeout)
                run.stalls_ms.append(stall)
                run.overflow_turns += not fits
                run.usage.append(link.context.tokens)
                if progress is not None:
                    pct = link.context.tokens / s.budget
                    progress.update(label=f"{policy} {traj.name} usage {pct:.0%}")
                await asyncio.sleep(s.turn_interval)  # the agent's own LLM call
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # the run is over; let a digest job still running finish, so the next run starts clean
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline and await _daemon_busy(link):
            if not link.proposals.empty():
                break  # a proposal arrived and is not applied: nothing else will start
            await asyncio.sleep(0.2)
        engine_after, skipped_after = await _engine(link)
        run.engine = engine_after - engine_before
        run.model_skipped = {k: n - skipped_before.get(k, 0) for k, n in skipped_after.items()}
        if canaries:
            run.canaries = await _score_canaries(link, traj, canaries, run)
    run.regret = _regret(traj, run)
    run.nfr = dict(retention(traj.turns, run.removed, run.added).metrics())
    return run


async def wait_for_room(
    link: AgentLink, changed: asyncio.Event, budget: int, stall_timeout: float
) -> tuple[float, bool]:
    """Block until the context fits ``budget`` (``changed`` is set whenever a proposal was
    applied): (ms waited, whether it fits).

    Gives up at ``stall_timeout``, or as soon as the daemon has nothing running and nothing pending
    for this agent (it cannot make room: only anchors are left), so an impossible turn costs about a
    second of waiting rather than the whole timeout.
    """
    if link.context.tokens <= budget:
        return 0.0, True
    t0 = time.perf_counter()
    deadline = time.monotonic() + stall_timeout
    while link.context.tokens > budget and time.monotonic() < deadline:
        changed.clear()
        try:
            await asyncio.wait_for(changed.wait(), min(STUCK_POLL_S, max(0.01, deadline - time.monotonic())))
            continue
        except TimeoutError:
            pass
        if link.proposals.empty() and not await _daemon_busy(link):
            break
    return (time.perf_counter() - t0) * 1000, link.context.tokens <= budget


async def _score_canaries(link: AgentLink, traj: Trajectory, canaries: Sequence[Canary], run: Run) -> Any:
    played = {sec.id: sec for sec in traj.sections}
    refs = sorted({r for c in canaries for r in run.compacted_by.get(c.section, ())})
    recalled: dict[str, list[Section]] = {}
    for ref in refs:  # one reference per request: an archived tool output may be large
        with contextlib.suppress(LinkError):
            recalled.update(await link.recall(ref))
    return score(canaries, played, list(link.context), run.compacted_by, recalled)


def _regret(traj: Trajectory, run: Run) -> dict[str, Any]:
    """The planner's regret (watcher.eval.regret): folded sections the agent referred to again
    (with their ids: which folds a policy regretted is what tells two runs apart)."""
    r = regret(traj.turns, run.removed)
    return dict(r.metrics()) | {"regretted_ids": list(r.regretted_ids)}


def token_counter(model: bool) -> Callable[[str], int]:
    path = default_model_path()
    if model and path and Path(path).is_file():
        from summarizer.tokenizer import load_counter

        return load_counter(path)
    return approx_tokens


def _prepare(s: ReplaySettings, count: Callable[[str], int]) -> list[tuple[Trajectory, list[Canary]]]:
    try:
        trajs = load_many(s.paths, count=count)
    except TrajectoryError as exc:
        raise ReplayError(str(exc)) from exc
    if s.canaries is None:
        return [(t, []) for t in trajs]
    try:
        sentences = load_canaries(s.canaries)
    except CanaryError as exc:
        raise ReplayError(str(exc)) from exc
    return [plant(t, sentences, s.seed, count) for t in trajs]


@contextlib.asynccontextmanager
async def _policy_daemon(s: ReplaySettings, policy: str) -> AsyncIterator[str]:
    """The endpoint to play ``policy`` on: a daemon of its own, or the ``--connect`` one."""
    if s.connect:
        yield s.connect
        return
    with tempfile.TemporaryDirectory(prefix=f"compactd-replay-{policy}-") as tmp:
        async with running_daemon(Path(tmp), s.config, s.model) as daemon:
            yield daemon.endpoint


def rotated(policies: Sequence[str], k: int) -> list[str]:
    """The policy order for the k-th trajectory: rotated, so no policy always plays first."""
    k %= max(1, len(policies))
    return [*policies[k:], *policies[:k]]


async def run_replay(s: ReplaySettings) -> dict[str, Any]:
    for p in s.policies:
        if p not in POLICIES:
            raise ReplayError(f"unknown policy {p!r}: choose from {', '.join(POLICIES)}")
    if not 1 <= s.rounds <= 20:
        raise ReplayError(f"--rounds must be in 1..20, not {s.rounds}")
    count = token_counter(s.model)
    once = _prepare(s, count)
    played = once + [(replace(t, name=f"{t.name}#{r}"), c) for r in range(2, s.rounds + 1) for t, c in once]
    progress = Progress(sum(len(t.turns) for t, _ in played) * len(s.policies), enabled=s.progress)
    runs: dict[str, list[Run]] = {p: [] for p in s.policies}
    loop, me, stopped = asyncio.get_running_loop(), asyncio.current_task(), asyncio.Event()

    def on_sigterm() -> None:  # stop the way ^C does: the daemons the replay started are stopped
        stopped.set()
        if me is not None:
            me.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        async with contextlib.AsyncExitStack() as stack:
            endpoints = {p: await stack.enter_async_context(_policy_daemon(s, p)) for p in s.policies}
            done: dict[int, dict[str, Run]] = {}
            slots = asyncio.Semaphore(max(1, s.jobs))

            async def trajectory(k: int, traj: Trajectory, canaries: list[Canary]) -> None:
                async with slots:
                    got: dict[str, Run] = {}
                    for policy in rotated(s.policies, k):
                        try:
                            got[policy] = await play(endpoints[policy], traj, s, policy, canaries, progress)
                        except LinkError as exc:
                            raise ReplayError(f"{policy} {traj.name}: {exc}") from exc
                    done[k] = got
                    if s.partial_json is not None:  # a long run keeps what it has measured so far
                        ks = sorted(done)
                        part = {p: [done[i][p] for i in ks] for p in s.policies}
                        text = json.dumps(_result(s, [played[i] for i in ks], part), indent=2, sort_keys=True)
                        s.partial_json.write_text(text + "\n", encoding="utf-8")

            try:
                async with asyncio.TaskGroup() as tg:
                    for k, (traj, canaries) in enumerate(played):
                        tg.create_task(trajectory(k, traj, canaries), name=f"replay {traj.name}")
            except* ReplayError as group:
                raise group.exceptions[0] from None
            for k in sorted(done):
                for p in s.policies:
                    runs[p].append(done[k][p])
    except asyncio.CancelledError:
        if stopped.is_set():
            raise ReplayError("stopped by SIGTERM") from None
        raise
    finally:
        progress.close()
        loop.remove_signal_handler(signal.SIGTERM)
    return _result(s, played, runs)


def _per_round(s: ReplaySettings, runs: dict[str, list[Run]]) -> dict[str, Any]:
    """With --rounds: each round's aggregate per policy, and the first policy's regret over each
    other policy's as median and range over the rounds (the headline ratio of a comparison)."""
    n = len(next(iter(runs.values()))) // s.rounds if runs else 0
    if s.rounds < 2 or not n:
        return {}
    rounds = [
        {p: aggregate(rs[r * n : (r + 1) * n]) for p, rs in runs.items()}
        for r in range(len(runs[s.policy]) // n)
    ]
    first, ratios = s.policies[0], {}
    for other in s.policies[1:]:
        pairs = [(a[first].get("regret"), a[other].get("regret")) for a in rounds]
        ratios[f"regret {first} / {other}"] = spread([x / y for x, y in pairs if x is not None and y])
    return {"rounds": rounds, "ratios": ratios}


def _result(
    s: ReplaySettings, played: list[tuple[Trajectory, list[Canary]]], runs: dict[str, list[Run]]
) -> dict[str, Any]:
    return _per_round(s, runs) | {
        "policies": {
            p: {"aggregate": aggregate(rs), "trajectories": {r.name: r.metrics() for r in rs}}
            for p, rs in runs.items()
        },
        "series": {p: {r.name: r.series() for r in rs} for p, rs in runs.items()},
        "settings": {
            "budget": s.budget,
            "reserve": s.reserve,
            "turn_interval": s.turn_interval,
            "policies": list(s.policies),
            "canaries": str(s.canaries) if s.canaries else None,
            "seed": s.seed,
            "rounds": s.rounds,
            "trajectories": [t.name for t, _ in played],
        },
    }
