"""The `compactd` command line: parse, then run the command."""

from __future__ import annotations

import sys

from watcher.cli.common import EXIT_USAGE
from watcher.cli.evaluate import cmd_replay
from watcher.cli.operate import cmd_agents, cmd_config, cmd_keygen, cmd_recall, cmd_run, cmd_status
from watcher.cli.parser import build_parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["mcp"]:  # parses its own arguments (ipc.integrations.mcp_server)
        from ipc.integrations.mcp_server import main as mcp_main
        from watcher.runtime.paths import default_endpoint

        return mcp_main(argv[1:], default_endpoint())
    if argv[:1] == ["hook"]:  # Claude Code hooks (ipc.integrations.hooks): JSON in, JSON out
        from ipc.integrations.hooks import main as hook_main
        from watcher.runtime.paths import default_endpoint

        return hook_main(argv[1:], default_endpoint())
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
        if args.command == "bench":
            result: int = args.bench_func(args)
            return result
    except KeyboardInterrupt:
        return 130
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
