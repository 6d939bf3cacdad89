"""The operator's commands: `run`, `status`, `agents`, `config check`, `keygen`, `recall`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from watcher.cli.common import EXIT_ERROR, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, fail
from watcher.observe import logs


def cmd_run(args: argparse.Namespace) -> int:
    from watcher.cli.console import UsageError, apply_run_flags
    from watcher.config import settings as cfgmod
    from watcher.runtime.daemon import Daemon, Options
    from watcher.runtime.engine import StartupError
    from watcher.runtime.paths import default_endpoint, default_state_dir
    from watcher.serve import heap

    heap.configure()  # before any thread starts (watcher.serve.heap)

    def load() -> cfgmod.Config:  # at start and on every SIGHUP: the file, then the flags over it
        return apply_run_flags(cfgmod.load_effective(args.config), args)

    try:
        cfg = load()
    except UsageError as exc:
        return fail(str(exc), EXIT_USAGE)
    except cfgmod.ConfigError as exc:
        return fail(str(exc))
    logs.configure(cfg.daemon.log_level, cfg.daemon.log_format)
    endpoint = args.socket or cfg.daemon.socket or default_endpoint()
    state_dir = Path(args.state_dir or cfg.daemon.state_dir or default_state_dir())
    daemon = Daemon(cfg, Options(endpoint, state_dir), load_config=load)
    try:
        asyncio.run(daemon.serve())
    except StartupError as exc:
        logs.get().error("startup_failed", error=str(exc))
        return fail(str(exc))
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
    from watcher.cli.console import client_endpoint
    from watcher.runtime.paths import ipc_path

    endpoint = args.socket or client_endpoint()
    path = ipc_path(endpoint)
    if path is not None:
        denied = f"permission denied on {path}: add your user to the daemon's group (compactd), log in again"
        try:
            path.stat()
        except PermissionError:  # e.g. /run/compactd is 0750 and we are not in the group
            return endpoint, None, fail(denied)
        except OSError:
            msg = f"no daemon at {endpoint}: socket file {path} does not exist"
            return endpoint, None, fail(msg, EXIT_UNREACHABLE)
        if not os.access(path, os.W_OK):
            return endpoint, None, fail(denied)
    try:
        reply = asyncio.run(_ask_status(endpoint, args.timeout))
    except TimeoutError:
        msg = f"no answer from {endpoint} within {args.timeout:g} s (is compactd running?)"
        return endpoint, None, fail(msg, EXIT_UNREACHABLE)
    except ProtocolError as exc:
        return endpoint, None, fail(f"unreadable reply from {endpoint}: {exc}")
    if reply.get("t") != "STATE":
        msg = f"unexpected reply from {endpoint}: {reply.get('t')} {reply.get('message', '')}"
        return endpoint, None, fail(msg)
    return endpoint, reply, EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from watcher.cli.console import render_status

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
    from watcher.cli.console import render_agents

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
    from watcher.cli.console import check_config
    from watcher.config.settings import ConfigError

    try:
        _, summary = check_config(args.file)
    except ConfigError as exc:
        return fail(str(exc))
    print(summary)
    return EXIT_OK


def cmd_keygen(args: argparse.Namespace) -> int:
    from watcher.serve.transport import TransportError, write_keypair

    try:
        public, secret = write_keypair(Path(args.dir), args.name)
    except (TransportError, OSError) as exc:
        return fail(str(exc))
    import zmq.auth

    key = zmq.auth.load_certificate(public)[0].decode("ascii")
    print(f"public key  {public}\nsecret key  {secret}  (keep private)\nz85 public  {key}")
    return EXIT_OK


def cmd_recall(args: argparse.Namespace) -> int:
    from watcher.config import settings as cfgmod
    from watcher.runtime.paths import default_state_dir
    from watcher.serve.recall import human_recall
    from watcher.store.store import DB_NAME, Store, StoreError

    if not (args.targets or args.search or args.list):
        return fail("give archive refs or section ids, --search TEXT or --list", EXIT_USAGE)
    state_dir = args.state_dir
    if not state_dir:
        try:
            state_dir = cfgmod.load_effective(args.config).daemon.state_dir or str(default_state_dir())
        except cfgmod.ConfigError as exc:
            return fail(str(exc))
    try:
        store = Store.readonly(Path(state_dir) / DB_NAME)
    except StoreError as exc:
        return fail(str(exc))
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
        return fail(str(exc))
    finally:
        store.db.close()
    print(text)
    return EXIT_OK if found or args.list else EXIT_ERROR
