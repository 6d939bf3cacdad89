"""``compactd proxy``: argument parsing and the command (registered by watcher.cli).

Signal handlers only set a flag; the ``async with Proxy(...)`` block is the whole lifecycle, and
leaving it shuts down within ``--shutdown-timeout`` seconds."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from ipc.proxy.rules import CachePolicy
from ipc.proxy.windows import DEFAULT_WINDOW, parse_override

DESCRIPTION = """\
An HTTP proxy between an agent and its model provider (OpenAI Chat Completions and Anthropic
Messages): each conversation becomes one agent of the daemon, and ready digests replace old
messages in later requests. Point the agent at it:

  ANTHROPIC_BASE_URL=http://127.0.0.1:8787 claude          # Claude Code
  OPENAI_BASE_URL=http://127.0.0.1:8787/v1 codex            # Codex CLI, the openai SDK, ...

Rules (identity, substitution, prompt cache): docs/PROXY.md."""


def default_socket() -> str:
    """The daemon's default endpoint (as watcher.paths, without $RUNTIME_DIRECTORY: under systemd
    that is the proxy's own directory; the unit passes --socket)."""
    if xdg := os.environ.get("XDG_RUNTIME_DIR"):
        return f"ipc://{Path(xdg) / 'compactd' / 'agents.sock'}"
    return f"ipc:///tmp/compactd-{os.getuid()}/agents.sock"


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _window(text: str) -> tuple[str, int]:
    try:
        return parse_override(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "proxy",
        help="HTTP proxy for agents speaking the OpenAI or Anthropic API (no code change)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--listen",
        type=_listen,
        default=("127.0.0.1", 8787),
        metavar="HOST:PORT",
        help="where agents connect (default 127.0.0.1:8787; port 0 picks one)",
    )
    p.add_argument(
        "--upstream",
        metavar="URL",
        default=None,
        help="the model provider (default: api.openai.com / api.anthropic.com by API)",
    )
    p.add_argument("--socket", metavar="ENDPOINT", default=None, help="the daemon's ZeroMQ endpoint")
    p.add_argument(
        "--window",
        type=_window,
        action="append",
        default=[],
        metavar="MODEL=TOKENS",
        help="context window of models whose name starts with MODEL (repeatable)",
    )
    p.add_argument(
        "--default-window",
        type=int,
        default=DEFAULT_WINDOW,
        metavar="TOKENS",
        help=f"window of models not in the table (default {DEFAULT_WINDOW})",
    )
    p.add_argument(
        "--bust-ratio",
        type=float,
        default=1.0,
        help="apply a digest inside the cached prefix when it saves this many times the "
        "tokens it busts (default 1.0)",
    )
    p.add_argument(
        "--apply-at",
        type=float,
        default=0.9,
        help="apply ready digests regardless of the cache from this fraction of the window",
    )
    p.add_argument(
        "--elide-to",
        type=float,
        default=0.6,
        help="when a request still reaches --apply-at with every ready digest applied, leave its oldest "
        "messages out of the upstream request down to this fraction of the window (default 0.6)",
    )
    p.add_argument(
        "--recall-tool",
        action="store_true",
        help="offer the model a compactd_recall tool (non-streaming requests that carry digests) and "
        "answer its calls from the archive, invisibly to the agent",
    )
    p.add_argument(
        "--reserve",
        type=float,
        default=0.5,
        help="the daemon plans a compaction above (1 - RESERVE) of the window (default 0.5): early, "
        "so digests wait ready and go upstream together",
    )
    p.add_argument("--max-body-mb", type=float, default=32.0, help="largest request accepted (default 32)")
    p.add_argument("--shutdown-timeout", type=float, default=10.0, help="seconds for requests in flight")
    return p


def settings_from(args: argparse.Namespace) -> object:
    from ipc.proxy.app import ProxySettings

    return ProxySettings(
        listen=args.listen,
        upstream=args.upstream,
        socket=args.socket or default_socket(),
        windows=dict(args.window),
        default_window=args.default_window,
        policy=CachePolicy(args.bust_ratio, args.apply_at, args.elide_to),
        recall_tool=args.recall_tool,
        reserve=args.reserve,
        max_body=int(args.max_body_mb * (1 << 20)),
        shutdown_s=args.shutdown_timeout,
    )


def main(args: argparse.Namespace) -> int:
    try:
        from ipc.proxy.app import Proxy, ProxySettings
    except ImportError as exc:
        print(
            f"compactd: error: the proxy needs the proxy extra (pip install 'compactd[proxy]'): {exc}",
            file=sys.stderr,
        )
        return 1
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        settings = settings_from(args)
    except ValueError as exc:
        print(f"compactd: error: {exc}", file=sys.stderr)
        return 2
    assert isinstance(settings, ProxySettings)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with Proxy(settings):
            await stop.wait()

    try:
        asyncio.run(serve())
    except OSError as exc:
        print(f"compactd: error: cannot listen on {args.listen[0]}:{args.listen[1]}: {exc}", file=sys.stderr)
        return 1
    return 0
