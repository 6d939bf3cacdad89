"""`compactd bench load --trajectories TRAJ...`: how many agents replaying real trajectories one
daemon keeps under budget — the knee.

Each step runs N agents (:mod:`watcher.eval.bench.loadagents`: real AgentLinks replaying the given
trajectories at a turn every 2-10 s, drawn per agent) for ``seconds`` against a fresh real daemon
(`compactd run`, the default configuration or ``--config``; the model on unless ``--no-model``) on
a loopback ipc socket. A step of more agents than the default ``[daemon] max_agents`` (1024)
raises that cap to its N, and changes nothing else. Once a second the bench samples the daemon's
RSS and CPU (/proc) and its compaction queue (STATUS: depth, waits, model jobs). Reported per
step: agents kept under their high watermark at every call, overflowing calls, stalled calls and
stall p99, ingest p50/p99, queue wait p50/p99 (the daemon's own figure), compactions/s, tokens
compacted/s, CPU of the daemon and of this client, RSS and PSS max, the model's share of the
applied digests and its jobs; each stall's turn and cause (``stalled_calls_by_cause``, the
longest ``stalls``: watcher.eval.bench.loadagents.stall_cause).

The steps go up the ladder (default 25, 50, 100, 200, 400) and stop at the first step with an
overflow or a stall; if none has one, N doubles past the ladder until a step does (at most
``max_agents``). The **knee** is the largest N before the first such step (0 overflows, 0 stalls);
the step at twice the knee is always measured (run at the end when the ladder did not hold it).

Goals (issue 17): knee >= 200 agents; at twice the knee 0 overflowing calls; ingest p99 <= 50 ms
in every step; the daemon's memory at the knee <= 400 MB (PSS of the daemon and its digest
worker summed: each page once; their RSS summed counts libpython, libllama and the other pages both
map twice, ~45 MB here, and is reported beside it); every step compacted (agents really crossed their
watermarks); with the model, every step ran model jobs. A goal a run did not reach (no knee, the
model never ran) is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import zmq.asyncio

from ipc.client import LinkError
from watcher.eval.bench.goals import BenchError, Goal, exercised, in_range, judge
from watcher.eval.bench.loadagents import ATTACH, STALL_CAUSES, AgentTally, LoadAgent, plans
from watcher.eval.bench.procstat import Sampler, ask_status
from watcher.eval.harness import ReplayError, running_daemon
from watcher.eval.replay import token_counter
from watcher.eval.scorecard import percentile
from watcher.eval.trajectories import Trajectory, TrajectoryError, load_many
from watcher.serve.looplag import LAG_EVERY_S, LoopLag

KNEE_LADDER: Final = (25, 50, 100, 200, 400)
MAX_AGENTS: Final = 4000  # twice a knee of 1 600 (a faster machine) is still measured
DEFAULT_AGENT_CAP: Final = 1024  # [daemon] max_agents' default: a step above it raises the cap, nothing else
KNEE_GOAL: Final = 200
RSS_GOAL_MB: Final = 400.0
INGEST_P99_GOAL_MS: Final = 50.0
STALLS_KEPT: Final = 50  # a step's longest stalls, with their turn and cause, in its JSON


@dataclass(frozen=True)
class TrajLoadSettings:
    paths: tuple[Path, ...]
    agents: tuple[int, ...] = KNEE_LADDER
    seconds: float = 120.0
    budget: int = 24000
    model: bool = True
    config: str | None = None
    seed: int = 1
    interval: tuple[float, float] = (2.0, 10.0)
    stall_timeout: float = 30.0
    max_agents: int = MAX_AGENTS  # the doubling past the ladder stops here
    attach: str = "appends"  # how each agent sends its history at the start (loadagents.ATTACH)

    def __post_init__(self) -> None:
        if not self.paths:
            raise ValueError("--trajectories needs at least one file")
        if self.attach not in ATTACH:
            raise ValueError(f"--attach must be one of {', '.join(ATTACH)}, not {self.attach!r}")
        in_range(
            agents=(max(self.agents, default=0), 1, self.max_agents),
            max_agents=(self.max_agents, 1, MAX_AGENTS),
            seconds=(self.seconds, 5, 3600),
            budget=(self.budget, 2000, 1_000_000),
        )


def _trajectories(s: TrajLoadSettings) -> tuple[list[Trajectory], list[str]]:
    """The playable trajectories, and those left out: turn 0 (prompt and task) over half the budget."""
    try:
        trajs = load_many(s.paths, count=token_counter(True))
    except TrajectoryError as exc:
        raise BenchError(str(exc)) from exc
    ok = [t for t in trajs if len(t.turns) > 1 and sum(x.tokens for x in t.turns[0]) <= s.budget // 2]
    if not ok:
        raise BenchError(f"no trajectory fits a {s.budget}-token budget (turn 0 over half of it)")
    return ok, [t.name for t in trajs if t not in ok]


def _agents_cap(folder: Path, n: int) -> str:
    path = folder / "agents-cap.toml"
    path.write_text(f"[daemon]\nmax_agents = {n}\n")
    return str(path)


async def run_step(s: TrajLoadSettings, trajs: list[Trajectory], n: int) -> dict[str, Any]:
    """N agents for ``s.seconds`` against a fresh daemon; the step's figures."""
    with tempfile.TemporaryDirectory(prefix=f"compactd-load{n}-") as tmp:
        config = s.config
        if config is None and n > DEFAULT_AGENT_CAP:  # only the cap on attached agents is raised
            config = _agents_cap(Path(tmp), n)
        async with running_daemon(Path(tmp), config, s.model) as daemon:
            ctx = zmq.asyncio.Context()
            ctx.set(zmq.MAX_SOCKETS, n + 64)  # one socket per agent, plus STATUS probes (default 1023)
            agents = [
                LoadAgent(p, daemon.endpoint, s.budget, ctx, s.attach)
                for p in plans(trajs, n, s.interval, s.seed)
            ]
            load0 = os.getloadavg()[0]
            try:
                await asyncio.gather(*(a.start() for a in agents))
                start = time.monotonic()
                end = start + s.seconds
                sampler = Sampler()
                holder = {"daemon": daemon}
                sampling = asyncio.create_task(sampler.run(ctx, holder, start))
                # this process's own loop lag: the share of the agents' ingest latency that is theirs
                client_lag = LoopLag(window=int(s.seconds / LAG_EVERY_S) + 100)
                lagging = asyncio.create_task(client_lag.run())
                await asyncio.gather(*(a.run(start, end, s.stall_timeout) for a in agents))
                elapsed = time.monotonic() - start
                sampling.cancel()
                lagging.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampling
                final = await ask_status(ctx, daemon.endpoint, 10.0, agents=False) or {}
            except (ReplayError, LinkError) as exc:
                raise BenchError(f"{n} agents: {exc}") from exc
            finally:
                await asyncio.gather(*(a.close() for a in agents))
                ctx.destroy(0)
    queue = (final.get("daemon") or {}).get("compaction_queue") or sampler.queue
    result = _step_result(n, s.budget, [a.tally for a in agents], sampler, queue, elapsed, load0)
    methods = (final.get("daemon") or {}).get("digest_methods") or {}  # watcher.serve.degrade
    result["digest_methods"] = methods
    # the daemon's loop lag over the step's last 30 s (STATUS daemon.loop_lag), and the agents' process's
    daemon_lag = (final.get("daemon") or {}).get("loop_lag") or {}
    result["daemon_loop_lag"] = daemon_lag
    result["daemon_loop_lag_ms_p99"] = daemon_lag.get("ms_p99")
    result["client_loop_lag"] = client_lag.stats()
    result["client_loop_lag_ms_p99"] = result["client_loop_lag"]["ms_p99"]
    result["degraded_digests"] = sum(int(methods.get(m, 0)) for m in ("masking", "headtail"))
    result["degradations"] = sum((methods.get("degradations") or {}).values())
    # the store's threads at the end of the step: the search index's lag, the WAL's checkpoints
    store = (final.get("daemon") or {}).get("store") or {}
    result["store"] = {k: v for k, v in store.items() if k != "path"}
    return result


def _mean(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return round(statistics.fmean(xs), 1) if xs else None


def _step_result(
    n: int,
    budget: int,
    tallies: list[AgentTally],
    sampler: Sampler,
    queue: dict[str, Any],
    elapsed: float,
    load0: float,
) -> dict[str, Any]:
    stalls = [x for t in tallies for x in t.stalls_ms]
    stalled = [x for t in tallies for x in t.stalls]
    ingest = [x for t in tallies for x in t.ingest_ms]
    applied = sum(t.compactions for t in tallies)
    model = sum(t.model_digests for t in tallies)
    rss = [p["rss_mb"] for p in sampler.curve if p.get("rss_mb") is not None]
    pss = [p["pss_mb"] for p in sampler.curve if p.get("pss_mb") is not None]
    return {
        "agents": n,
        "seconds": round(elapsed, 1),
        "calls": sum(t.calls for t in tallies),
        "agents_under_high_watermark": sum(t.over_high == 0 for t in tallies),
        "agents_crossed_trigger": sum(t.compactions > 0 for t in tallies),
        "calls_over_high_watermark": sum(t.over_high for t in tallies),
        "overflow_calls": sum(t.overflows for t in tallies),
        "stalled_calls": sum(t.stalled for t in tallies),
        "stalled_calls_by_cause": {c: sum(x.cause == c for x in stalled) for c in STALL_CAUSES},
        "stalls": [asdict(x) for x in sorted(stalled, key=lambda x: -x.ms)[:STALLS_KEPT]],
        "stall_ms_p99": round(percentile(stalls, 99), 1),
        "stall_ms_max": round(max(stalls, default=0.0), 1),
        "overflow_calls_oversized_turn": sum(t.overflows_oversized for t in tallies),
        "stalled_calls_oversized_turn": sum(t.stalled_oversized for t in tallies),
        "peak_usage_max": round(max(t.peak for t in tallies) / budget, 3),  # share of the budget
        "ingest_ms_p50": round(percentile(ingest, 50), 2),
        "ingest_ms_p99": round(percentile(ingest, 99), 2),
        "slowest_append": max((t.slowest for t in tallies), default=(0.0, 0)),  # (ms, tokens)
        "append_errors": sum(t.errors for t in tallies),
        "queue_wait_ms_p50": queue.get("wait_ms_p50"),
        "queue_wait_ms_p99": queue.get("wait_ms_p99"),
        "queue_depth_max": queue.get("max_depth"),
        "scheduler_passes": queue.get("passes"),  # its walks over the waiting jobs' deadlines
        "scheduler_pass_ms_max": queue.get("pass_ms_max"),  # the loop's time the longest took
        "compactions": applied,
        "stale_proposals": sum(t.stale for t in tallies),
        "compactions_per_s": round(applied / elapsed, 2),
        "tokens_compacted_per_s": round(sum(t.tokens_compacted for t in tallies) / elapsed, 1),
        "tokens_saved_per_s": round(sum(t.tokens_saved for t in tallies) / elapsed, 1),
        "model_jobs": queue.get("model_jobs"),
        "model_skipped": queue.get("model_skipped"),  # jobs of a daemon with a model digested without it
        "model_digests": model,
        "model_share_of_digests": round(model / applied, 3) if applied else None,
        "daemon_cpu_pct_mean": _mean([p.get("cpu_pct") for p in sampler.curve]),
        "worker_cpu_pct_mean": _mean([p.get("worker_cpu_pct") for p in sampler.curve]),
        "client_cpu_pct_mean": _mean([p.get("client_cpu_pct") for p in sampler.curve]),
        # the host's share of this VM's CPUs (procstat.cpu_times): a step slower for want of CPU says so
        "steal_pct_mean": _mean([p.get("steal_pct") for p in sampler.curve]),
        "steal_pct_max": max(
            (v for p in sampler.curve if (v := p.get("steal_pct")) is not None), default=None
        ),
        "rss_mb_max": max(rss, default=None),
        "rss_mb_first": rss[0] if rss else None,
        "pss_mb_max": max(pss, default=None),  # the same processes, each shared page counted once
        # once a second: (s, daemon RSS MB, MB of section text all mirrors hold): RSS per mirrored MB,
        # and whether RSS flattens at a [daemon] max_total_bytes cap (issue 17, Deliver 4)
        "rss_mirrors_curve": [[p["t"], p.get("rss_mb"), p.get("mirrors_mb")] for p in sampler.curve],
        "loadavg_start": round(load0, 2),
        "loadavg_end": round(os.getloadavg()[0], 2),
        "start_tokens_median": statistics.median(t.start_tokens for t in tallies),
        "clean": not any(t.overflows or t.stalled for t in tallies),
    }


async def run_traj_load(
    s: TrajLoadSettings, progress: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    trajs, skipped = _trajectories(s)
    steps: dict[int, dict[str, Any]] = {}

    async def step(n: int) -> dict[str, Any]:
        progress(f"load: {n} agents for {s.seconds:g} s (load average {os.getloadavg()[0]:.2f})")
        steps[n] = await run_step(s, trajs, n)
        r = steps[n]
        progress(
            f"load: {n} agents: overflow {r['overflow_calls']}, stalled {r['stalled_calls']}, "
            f"queue wait p99 {r['queue_wait_ms_p99']} ms, degraded digests {r['degraded_digests']}, "
            f"rss {r['rss_mb_max']} MB, pss {r['pss_mb_max']} MB"
        )
        return r

    for n in s.agents:
        if not (await step(n))["clean"]:
            break
    else:  # every step of the ladder was clean: double until a step is not (or the cap)
        n = 2 * max(s.agents)
        while n <= s.max_agents and (await step(n))["clean"]:
            n *= 2
    knee = 0
    for n in sorted(steps):
        if not steps[n]["clean"]:
            break
        knee = n
    if knee and 2 * knee not in steps and 2 * knee <= s.max_agents:
        await step(2 * knee)
    result: dict[str, Any] = {
        "knee_agents": knee,
        "knee_is_lower_bound": all(r["clean"] for r in steps.values()),  # no step failed (the cap)
        "steps": [steps[n] for n in sorted(steps)],
        "settings": {
            "trajectories": [t.name for t in trajs],
            "skipped_trajectories": skipped,
            "agents": list(s.agents),
            "seconds": s.seconds,
            "budget": s.budget,
            "model": s.model,
            "config": s.config,
            "seed": s.seed,
            "turn_interval_s": list(s.interval),
            "stall_timeout_s": s.stall_timeout,
            "max_agents": s.max_agents,
            "attach": s.attach,
            "cpus": os.cpu_count(),
        },
    }
    return judge(result, _goals(s, steps, knee))


def _goals(s: TrajLoadSettings, steps: dict[int, dict[str, Any]], knee: int) -> list[Goal]:
    at_knee = steps.get(knee)
    double = steps.get(2 * knee) if knee else None
    rows = list(steps.values())
    goals = [
        Goal("knee_agents", knee, ">=", KNEE_GOAL),
        Goal("overflow_calls at 2x knee", double["overflow_calls"] if double else None, "==", 0),
        Goal("ingest_ms_p99 (worst step)", max(r["ingest_ms_p99"] for r in rows), "<=", INGEST_P99_GOAL_MS),
        Goal("pss_mb_max at knee", at_knee["pss_mb_max"] if at_knee else None, "<=", RSS_GOAL_MB),
        Goal("steps where agents compacted", sum(r["compactions"] > 0 for r in rows), "==", len(rows)),
    ]
    if s.model:
        ran = sum(bool(r["model_jobs"]) for r in rows)
        goals.append(Goal("steps with model jobs", exercised(ran, ran > 0), "==", len(rows)))
    return goals
