"""`compactd bench load`: many agents streaming at once against a real daemon; memory, latency and
fairness of the compaction queue, optionally with a kill -9 in the middle.

N agents (real AgentLinks in this process, one shared ZeroMQ context) each append one section on a
fixed schedule (``--rate`` per second; ``--chatty`` of them at ``--chatty-factor`` times that) for
``--seconds``: tool output of several shapes (logs, test runs, JSON, grep hits) and prose, sized
like an agent's turns. Every append waits for its SYNCED: the round trip is the ingest latency.
Proposals are applied as they arrive. Once a second the bench samples the daemon's RSS and CPU
(/proc) and its compaction queue (STATUS).

Figures: ingest latency p50/p99, achieved deltas/s, the RSS curve (and its growth over the second
half of the run), the queue's depth and waits, and fairness: compactions per quiet agent (min,
median, Jain's index), their peak usage, and how often an agent's context was over its budget.

``--kill-at S``: SIGKILL the daemon S seconds in and start it again on the same socket and state
directory while the agents keep going. Reported: the outage, how many agents reattached and
resynced by themselves, PRAGMA integrity_check, and RECALL of archived originals (every proposal
an agent applied, checked byte for byte after the restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import signal
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import zmq.asyncio

from ipc.client import AgentLink, LinkError
from ipc.sections import Section
from watcher.eval.bench.goals import BenchError, Goal, exercised, in_range, judge
from watcher.eval.bench.procstat import Sampler, ask_status, loop_lag
from watcher.eval.harness import DaemonProcess, ReplayError
from watcher.eval.scorecard import percentile, taken_out
from watcher.store.store import DB_NAME, check_integrity, connect_readonly

RECALL_SAMPLE: Final = 400  # applied proposals whose originals are recalled after the run
LINK_TIMEOUT_S: Final = 3.0  # an append in flight when the daemon is killed fails after this long


@dataclass(frozen=True)
class LoadSettings:
    agents: int = 200
    rate: float = 5.0
    seconds: float = 60.0
    budget: int = 32000
    model: bool = True
    chatty: int = 1
    chatty_factor: float = 10.0
    kill_at: float = 0.0
    seed: int = 1
    config: str | None = None

    def __post_init__(self) -> None:
        in_range(agents=(self.agents, 1, 2000), rate=(self.rate, 0.1, 100), seconds=(self.seconds, 1, 3600))
        if not 0 <= self.chatty < self.agents:
            raise ValueError("--chatty must be below --agents")
        if self.kill_at and not 0 < self.kill_at < self.seconds:
            raise ValueError("--kill-at must be inside the run")


# --- what the agents send ------------------------------------------------------------------------------


def _log(rng: random.Random, n: int) -> str:
    out = []
    for j in range(n):
        level = rng.choices(["INFO", "WARN", "ERROR"], [90, 8, 2])[0]
        ms = rng.randint(1, 900)
        out.append(f"2026-01-0{1 + j % 9}T10:{j % 60:02d}:00 {level} worker-{j % 7} batch {j} took {ms} ms")
    return "\n".join(out)


def _tests(rng: random.Random, n: int) -> str:
    lines = [
        f"tests/test_mod{j % 9}.py::test_case_{j} {'PASSED' if rng.random() > 0.05 else 'FAILED'}"
        for j in range(n)
    ]
    return "\n".join([*lines, f"==== {n} tests in {rng.uniform(1, 30):.2f}s ===="])


def _json(rng: random.Random, n: int) -> str:
    items = [
        {"id": j, "name": f"item-{j}", "score": round(rng.random(), 3), "tags": ["a", "b"][: j % 3]}
        for j in range(n)
    ]
    return json.dumps(items)


def _grep(rng: random.Random, n: int) -> str:
    return "\n".join(
        f"src/pkg/mod_{j % 11}.py:{rng.randint(1, 900)}: def handler_{j}(request):" for j in range(n)
    )


_SENTENCES: Final = (
    "The parser drops the last field when a line ends with a tab.",
    "I will keep that field and add a regression test for tab endings.",
    "The failing test is tests/test_reader.py::test_tabs, it expects 4 rows and gets 3.",
    "Next I rerun the suite and check the writer, which shares the same split helper.",
    "The user asked to keep the public API unchanged, so the fix stays inside read_rows().",
    "Coverage dropped to 81% after the refactor; the missing lines are in the error path.",
    "I looked at the logs: the worker retries three times and then gives up with a timeout.",
    "The config default for retries is 3; raising it would only hide the real problem.",
)


def _prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_SENTENCES) for _ in range(max(1, n // 3)))


def text_pool(seed: int, size: int = 256) -> list[tuple[str, str]]:
    """(kind, text) pairs sized like agents' turns: mostly tool output, some prose."""
    rng = random.Random(seed)
    pool = []
    for _ in range(size):
        roll = rng.random()
        if roll < 0.6:
            make = rng.choice([_log, _tests, _json, _grep])
            pool.append(("tool_result", make(rng, rng.randint(4, 40))))
        else:
            pool.append((rng.choice(["assistant", "user"]), _prose(rng, rng.randint(3, 25))))
    return pool


# --- one agent -------------------------------------------------------------------------------------------


@dataclass
class AgentRun:
    name: str
    index: int
    chatty: bool
    latency_ms: list[float] = field(default_factory=list)
    appends: int = 0
    errors: int = 0
    compactions: int = 0
    stale: int = 0
    peak_usage: float = 0.0
    over_budget: int = 0  # appends after which the context exceeded the budget
    over_budget_s: list[float] = field(default_factory=list)  # ... seconds into the run of each
    applied: list[tuple[str, tuple[Section, ...]]] = field(default_factory=list)  # (archive ref, originals)
    first_ok_after_kill: float | None = None


async def run_agent(
    link: AgentLink,
    run: AgentRun,
    pool: list[tuple[str, str]],
    rate: float,
    start: float,
    end: float,
    killed: asyncio.Event,
    rng: random.Random,
) -> None:
    period = 1.0 / rate
    next_t = start + rng.random() * period
    i = 0
    while True:
        delay = next_t - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if time.monotonic() >= end:
            return
        kind, text = pool[(i * 7 + run.index * 13) % len(pool)]
        text = f"[{run.name} #{i}]\n{text}"
        sec = Section(f"{run.name}-{i}", kind, text, tokens=len(text) // 3)
        t0 = time.perf_counter()
        try:
            await link.append(sec, wait=True)
            run.latency_ms.append((time.perf_counter() - t0) * 1000)
            if killed.is_set() and run.first_ok_after_kill is None:
                run.first_ok_after_kill = time.monotonic()
        except LinkError:
            run.errors += 1
        run.appends += 1
        i += 1
        while not link.proposals.empty():
            p = link.proposals.get_nowait()
            originals = taken_out(p, [link.context.get(sid) for sid in p.replaces])
            if await link.apply(p):
                run.compactions += 1
                if p.archive:
                    run.applied.append((p.archive[0], originals))
            else:
                run.stale += 1
        usage = link.context.tokens / link.budget
        run.peak_usage = max(run.peak_usage, usage)
        if usage > 1.0:
            run.over_budget += 1
            run.over_budget_s.append(time.monotonic() - start)
        next_t += period
        if next_t < time.monotonic() - 1.0:  # fell more than a second behind: skip, do not burst
            next_t = time.monotonic()


# --- the run ---------------------------------------------------------------------------------------------


async def run_load(s: LoadSettings) -> dict[str, Any]:
    pool = text_pool(s.seed)
    rng = random.Random(s.seed)
    with tempfile.TemporaryDirectory(prefix="compactd-load-") as tmp:
        work = Path(tmp)
        holder = {"daemon": DaemonProcess(work, s.config, s.model)}
        ctx = zmq.asyncio.Context()
        links: list[AgentLink] = []
        kill: dict[str, Any] = {}
        try:
            await holder["daemon"].wait_ready(180)
            runs = [AgentRun(f"load-{n:04d}", n, n < s.chatty) for n in range(s.agents)]
            for r in runs:
                link = AgentLink(
                    holder["daemon"].endpoint,
                    agent=r.name,
                    budget=s.budget,
                    timeout_s=LINK_TIMEOUT_S,
                    zmq_context=ctx,
                )
                await link.connect()
                links.append(link)
            killed = asyncio.Event()
            start = time.monotonic() + 0.5
            end = start + s.seconds
            sampler = Sampler()
            sampling = asyncio.create_task(sampler.run(ctx, holder, start))
            lags: list[float] = []
            lagging = asyncio.create_task(loop_lag(lags))
            tasks = [
                asyncio.create_task(
                    run_agent(
                        link,
                        r,
                        pool,
                        s.rate * (s.chatty_factor if r.chatty else 1.0),
                        start,
                        end,
                        killed,
                        random.Random(rng.random()),
                    )
                )
                for link, r in zip(links, runs, strict=True)
            ]
            if s.kill_at:
                kill = await _kill_and_restart(s, work, holder, start, killed)
            await asyncio.gather(*tasks)
            elapsed = time.monotonic() - start
            for t in (sampling, lagging):
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            await asyncio.sleep(1.0)  # let the last proposals and ACKs settle
            for link, r in zip(links, runs, strict=True):  # apply what arrived at the very end
                while not link.proposals.empty():
                    p = link.proposals.get_nowait()
                    if await link.apply(p):
                        r.compactions += 1
            checks = await _final_checks(links, runs, rng)
            final = await ask_status(ctx, holder["daemon"].endpoint) or {}
        except ReplayError as exc:
            raise BenchError(str(exc)) from exc
        finally:
            for link in links:
                with contextlib.suppress(Exception):
                    await link.close(bye=False)
            ctx.destroy(0)
            exit_code = holder["daemon"].stop()
    checks["client_loop_lag_ms_p99"] = round(percentile(lags, 99), 2)
    return _result(s, runs, sampler, elapsed, kill, checks, final.get("daemon", {}), exit_code)


async def _kill_and_restart(
    s: LoadSettings, work: Path, holder: dict[str, DaemonProcess], start: float, killed: asyncio.Event
) -> dict[str, Any]:
    await asyncio.sleep(max(0.0, start + s.kill_at - time.monotonic()))
    old = holder["daemon"]
    old.proc.send_signal(signal.SIGKILL)
    t_kill = time.monotonic()
    old.stop()
    killed.set()
    db = connect_readonly(work / "state" / DB_NAME)
    try:
        problems = check_integrity(db)
    finally:
        db.close()
    new = DaemonProcess(work, s.config, s.model, log_name="daemon-restarted.log")
    holder["daemon"] = new
    await new.wait_ready(180)
    return {
        "killed_at_s": round(t_kill - start, 1),
        "restart_s": round(time.monotonic() - t_kill, 2),
        "integrity_ok": not problems,
        "integrity_problems": problems[:5],
        "t_kill": t_kill,
    }


async def _final_checks(links: list[AgentLink], runs: list[AgentRun], rng: random.Random) -> dict[str, Any]:
    mismatched = 0
    for link in links:
        try:
            mine = (await link.status())["agents"][0]
        except (LinkError, KeyError, IndexError):
            mismatched += 1
            continue
        if (mine.get("version"), mine.get("tokens")) != (link.context.version, link.context.tokens):
            mismatched += 1
    applied = [
        (link, ref, originals) for link, r in zip(links, runs, strict=True) for ref, originals in r.applied
    ]
    sample = rng.sample(applied, min(RECALL_SAMPLE, len(applied)))
    lost = 0
    for link, ref, originals in sample:
        try:
            got = (await link.recall(ref)).get(ref, [])
        except LinkError:
            got = []
        if [(g.id, g.text) for g in got] != [(o.id, o.text) for o in originals]:
            lost += 1
    return {"mirror_mismatches": mismatched, "recalled": len(sample), "lost_originals": lost}


def _jain(xs: list[int]) -> float:
    total = sum(xs)
    squares = sum(x * x for x in xs)
    return round(total * total / (len(xs) * squares), 3) if squares else 1.0


def _per_10s(times: list[float], seconds: float) -> list[int]:
    counts = [0] * max(1, math.ceil(seconds / 10))
    for t in times:
        counts[min(len(counts) - 1, max(0, int(t // 10)))] += 1
    return counts


def _result(
    s: LoadSettings,
    runs: list[AgentRun],
    sampler: Sampler,
    elapsed: float,
    kill: dict[str, Any],
    checks: dict[str, Any],
    daemon: dict[str, Any],
    exit_code: int,
) -> dict[str, Any]:
    lat = [x for r in runs for x in r.latency_ms]
    quiet = [r for r in runs if not r.chatty]
    chatty = [r for r in runs if r.chatty]
    appends = sum(r.appends for r in runs)
    rss = [p["rss_mb"] for p in sampler.curve if p.get("rss_mb") is not None]
    half = [p["rss_mb"] for p in sampler.curve if p.get("rss_mb") is not None and p["t"] >= s.seconds / 2]
    out: dict[str, Any] = {
        "agents": s.agents,
        "seconds": round(elapsed, 1),
        "deltas": appends,
        "deltas_per_s": round(appends / elapsed, 1),
        "target_deltas_per_s": round(s.rate * (s.agents - s.chatty + s.chatty * s.chatty_factor), 1),
        "ingest_ms_p50": round(percentile(lat, 50), 2),
        "ingest_ms_p99": round(percentile(lat, 99), 2),
        "ingest_ms_max": round(max(lat, default=0.0), 1),
        "append_errors": sum(r.errors for r in runs),
        "rss_mb_max": max(rss, default=0.0),
        "rss_mb_last": rss[-1] if rss else 0.0,
        "rss_mb_growth_second_half": round(max(half) - min(half), 1) if half else 0.0,
        "rss_curve": [[p["t"], p["rss_mb"]] for p in sampler.curve],
        # the agents' contexts as the daemon mirrors them (STATUS daemon.mirror_bytes): what RSS
        # must grow with while the agents' contexts grow (bounded by daemon.max_total_bytes)
        "mirrors_mb_curve": [[p["t"], p.get("mirrors_mb")] for p in sampler.curve],
        "queue_depth_max": sampler.queue.get("max_depth"),
        "queue_curve": [[p["t"], p.get("queue_depth")] for p in sampler.curve],
        "queue": sampler.queue,
        "cpu_pct_curve": [[p["t"], p.get("cpu_pct")] for p in sampler.curve],
        "worker_cpu_pct_curve": [[p["t"], p.get("worker_cpu_pct")] for p in sampler.curve],
        "client_cpu_pct_curve": [[p["t"], p.get("client_cpu_pct")] for p in sampler.curve],
        "loadavg_curve": [[p["t"], p.get("loadavg")] for p in sampler.curve],
        "compactions": sum(r.compactions for r in runs),
        "stale_proposals": sum(r.stale for r in runs),
        "quiet_compactions_min": min((r.compactions for r in quiet), default=0),
        "quiet_compactions_median": statistics.median([r.compactions for r in quiet]) if quiet else 0,
        "quiet_compactions_max": max((r.compactions for r in quiet), default=0),
        "quiet_jain_index": _jain([r.compactions for r in quiet]),
        "quiet_peak_usage_median": round(statistics.median([r.peak_usage for r in quiet]), 3)
        if quiet
        else 0.0,
        "quiet_peak_usage_max": round(max((r.peak_usage for r in quiet), default=0.0), 3),
        "chatty_compactions": [r.compactions for r in chatty],
        "chatty_peak_usage": [round(r.peak_usage, 3) for r in chatty],
        "quiet_appends_over_budget": sum(r.over_budget for r in quiet),
        "quiet_appends_over_budget_fraction": round(
            sum(r.over_budget for r in quiet) / max(1, sum(r.appends for r in quiet)), 4
        ),
        "chatty_appends_over_budget": sum(r.over_budget for r in chatty),
        # when the quiet agents' appends over budget came: counts per 10 s of the run
        "quiet_over_budget_per_10s": _per_10s([t for r in quiet for t in r.over_budget_s], s.seconds),
        "daemon_degraded": daemon.get("degraded"),
        "daemon_errors": daemon.get("errors"),
        "daemon_exit_code": exit_code,
        **checks,
        "settings": {
            "agents": s.agents,
            "rate": s.rate,
            "seconds": s.seconds,
            "budget": s.budget,
            "model": s.model,
            "chatty": s.chatty,
            "chatty_factor": s.chatty_factor,
            "kill_at": s.kill_at,
            "seed": s.seed,
        },
    }
    if kill:
        t_kill = kill.pop("t_kill")
        back = [r.first_ok_after_kill - t_kill for r in runs if r.first_ok_after_kill is not None]
        kill["agents_recovered"] = len(back)
        kill["recovery_s_p50"] = round(percentile(back, 50), 2)
        kill["recovery_s_max"] = round(max(back, default=0.0), 2)
        out["kill"] = kill
    quiet_appends = sum(r.appends for r in quiet)
    model_jobs = sampler.queue.get("model_jobs")
    goals = [
        Goal("ingest_ms_p99", exercised(out["ingest_ms_p99"], bool(lat)), "<=", 50.0),
        Goal(
            "rss_mb_growth_second_half",
            out["rss_mb_growth_second_half"],
            "<=",
            round(0.25 * max(1.0, out["rss_mb_max"]), 1),
        ),
        Goal("queue_depth_max", out["queue_depth_max"], "<=", s.agents),
        Goal(
            "quiet_appends_over_budget",
            exercised(out["quiet_appends_over_budget"], quiet_appends > 0),
            "==",
            0,
        ),
        Goal("lost_originals", exercised(checks["lost_originals"], checks["recalled"] > 0), "==", 0),
        Goal("mirror_mismatches", checks["mirror_mismatches"], "==", 0),
        Goal("daemon_exit_code", exit_code, "==", 0),
    ]
    if s.model:  # "with the model" is a claim only if the model ran
        goals.append(Goal("model_jobs", exercised(model_jobs, bool(model_jobs)), ">=", 1))
    if kill:
        goals += [
            Goal("kill.integrity_ok", kill["integrity_ok"], "==", True),
            Goal("kill.agents_recovered", kill["agents_recovered"], "==", s.agents),
        ]
    return judge(out, goals)
