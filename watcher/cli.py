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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="compactd",
        description="Optimistic context compaction for LLM agents: a daemon that keeps every attached "
        "agent's context under its budget by summarizing low-value sections ahead of time.",
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

    st = sub.add_parser("status", help="ask a running daemon for its state")
    st.add_argument(
        "--socket", metavar="ENDPOINT", help="the daemon's endpoint (default: the per-user socket)"
    )
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")
    st.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for an answer (default 3)")

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
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "status":
            return cmd_status(args)
        if args.command == "replay":
            return cmd_replay(args)
    except KeyboardInterrupt:
        return 130
    return EXIT_USAGE


def _fail(msg: str, code: int = EXIT_ERROR) -> int:
    print(f"compactd: error: {msg}", file=sys.stderr)
    return code


def cmd_run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from watcher import config as cfgmod
    from watcher.daemon import Daemon, Options, StartupError
    from watcher.paths import default_endpoint, default_state_dir

    try:
        cfg = cfgmod.load_effective(args.config)
    except cfgmod.ConfigError as exc:
        return _fail(str(exc))
    if args.model:
        cfg = replace(cfg, model=replace(cfg.model, path=args.model))
    if args.no_model:
        cfg = replace(cfg, model=replace(cfg.model, enabled=False))
    logs.configure(cfg.daemon.log_level, cfg.daemon.log_format)
    endpoint = args.socket or cfg.daemon.socket or default_endpoint()
    state_dir = Path(args.state_dir or cfg.daemon.state_dir or default_state_dir())
    daemon = Daemon(cfg, Options(endpoint, state_dir))
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


def cmd_status(args: argparse.Namespace) -> int:
    from watcher.paths import default_endpoint, ipc_path

    endpoint = args.socket or default_endpoint()
    path = ipc_path(endpoint)
    if path is not None and not path.exists():
        return _fail(f"no daemon at {endpoint}: socket file {path} does not exist", EXIT_UNREACHABLE)
    try:
        reply = asyncio.run(_ask_status(endpoint, args.timeout))
    except TimeoutError:
        return _fail(
            f"no answer from {endpoint} within {args.timeout:g} s (is compactd running?)", EXIT_UNREACHABLE
        )
    if reply.get("t") != "STATE":
        return _fail(f"unexpected reply from {endpoint}: {reply.get('t')} {reply.get('message', '')}")
    if args.json:
        json.dump(
            {"daemon": reply.get("daemon", {}), "agents": reply.get("agents", [])}, sys.stdout, indent=2
        )
        print()
    else:
        print(render_status(reply))
    return EXIT_OK


def render_status(reply: dict[str, Any]) -> str:
    d = reply.get("daemon", {})
    lines = [
        f"compactd up {d.get('uptime_s', 0):.0f}s · {d.get('agents', 0)} agent(s) · "
        f"{'DEGRADED: ' + str(d.get('degraded_reason')) if d.get('degraded') else 'model ok'}",
    ]
    agents = reply.get("agents", [])
    if agents:
        cols = ("TOKENS", 9), ("BUDGET", 9), ("USAGE", 6), ("PENDING", 7), ("COMPACTIONS", 11), ("SAVED", 9)
        lines.append(f"{'AGENT':<24} " + " ".join(f"{name:>{width}}" for name, width in cols))
        for a in agents:
            lines.append(
                f"{a['agent'][:24]:<24} {a['tokens']:>9} {a['budget']:>9} {a['usage'] * 100:>5.1f}% "
                f"{a['pending_proposals']:>7} {a['compactions']:>11} {a['tokens_saved']:>9}"
            )
    return "\n".join(lines)


def cmd_replay(args: argparse.Namespace) -> int:
    from watcher.replay import ReplayError, ReplaySettings, run_replay

    settings = ReplaySettings(
        paths=[Path(p) for p in args.trajectories],
        budget=args.budget,
        reserve=args.reserve,
        turn_interval=args.turn_interval,
        connect=args.connect,
        config=args.config,
        model=not args.no_model,
        stall_timeout=args.stall_timeout,
    )
    try:
        result = asyncio.run(run_replay(settings))
    except ReplayError as exc:
        return _fail(str(exc))
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    agg = result["policies"]["optimistic"]["aggregate"]
    print(json.dumps(agg, sort_keys=True) if args.json else text)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
