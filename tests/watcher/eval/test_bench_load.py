"""A tiny `compactd bench load --trajectories` (3 agents, short steps, no model) through the real
command and real daemons: the report has the knee and the per-step figures, the plot is written,
and the knee goal (>= 200 agents), impossible with 3 agents, makes the command exit 1. An agent's
history goes one append per turn or in one SNAPSHOT (`--attach`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zmq.asyncio

from tests.fixtures.cli import compactd
from tests.fixtures.trajectories import require
from watcher.cli.evaluate import parse_agents
from watcher.eval.bench.loadagents import STALL_CAUSES, AgentPlan, LoadAgent, stall_cause
from watcher.eval.bench.loadtraj import TrajLoadSettings
from watcher.eval.harness import DaemonProcess
from watcher.eval.replay import token_counter
from watcher.eval.trajectories import load_many
from watcher.planning.lookahead import Lookahead

pytestmark = pytest.mark.serial  # races the machine's own speed (tests/conftest.py)

MINI = require() / "mini-swe-agent"

STEP_KEYS = (
    "agents",
    "overflow_calls",
    "stalled_calls",
    "stall_ms_p99",
    "queue_wait_ms_p50",
    "queue_wait_ms_p99",
    "rss_mb_max",
    "agents_under_high_watermark",
    "compactions_per_s",
    "tokens_compacted_per_s",
    "daemon_cpu_pct_mean",
    "ingest_ms_p99",
    "model_share_of_digests",
)


@pytest.mark.slow
def test_tiny_trajectory_load_reports_the_knee_and_fails_the_knee_goal(
    tmp_path: Path,
) -> None:
    out, png = tmp_path / "load.json", tmp_path / "knee.png"
    trajs = [str(p) for p in sorted(MINI.glob("*.traj.json"))[:3]]
    run = compactd(
        *("bench", "load", "--trajectories", *trajs, "--agents", "3", "--max-agents", "6", "--seconds", "8"),
        *("--budget", "8000", "--no-model", "--json", str(out), "--plot", str(png)),
        timeout=600,
    )
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    r = json.loads(out.read_text())
    steps = {s["agents"]: s for s in r["steps"]}
    assert set(steps) in ({3}, {3, 6})  # the ladder, then doubled up to --max-agents if clean
    knee = r["knee_agents"]  # the largest N before the first step with an overflow or a stall
    assert knee == (0 if not steps[3]["clean"] else 3 if not steps[6]["clean"] else 6)
    assert r["knee_is_lower_bound"] == all(s["clean"] for s in steps.values())
    for step in steps.values():
        for key in STEP_KEYS:
            assert key in step, key
        assert step["calls"] > 0 and step["rss_mb_max"] > 0
        assert 0 < step["pss_mb_max"] <= step["rss_mb_max"]  # shared pages once, not once per process
        assert step["model_jobs"] == 0  # --no-model
        # the agents' latency split: the daemon's loop lag (STATUS) and this process's own
        assert step["daemon_loop_lag"]["samples"] > 0 and step["daemon_loop_lag_ms_p99"] >= 0
        assert step["client_loop_lag"]["samples"] > 0 and step["client_loop_lag_ms_p99"] >= 0
        # the host's share of this VM's CPUs during the step (/proc/stat's steal), once a second
        assert 0 <= step["steal_pct_mean"] <= step["steal_pct_max"] <= 100
        # every stall counted has a cause; the longest are kept with the turn that made them
        assert sum(step["stalled_calls_by_cause"].values()) == step["stalled_calls"]
        assert set(step["stalled_calls_by_cause"]) == set(STALL_CAUSES)
        assert len(step["stalls"]) == min(step["stalled_calls"], 50)
        for st in step["stalls"]:
            assert st["ms"] > 0
            # budget 8000 at the default reserve 0.15: high watermark 6800
            assert st["cause"] == stall_cause(st["before_tokens"], st["turn_tokens"], 6800, 8000)
    assert "knee_agents" in r["missed"] and r["goals"]["knee_agents"]["target"] == ">= 200"
    assert "goal missed: knee_agents" in run.stderr
    assert png.stat().st_size > 10_000


def test_agents_ladder_is_checked() -> None:
    assert parse_agents("25,50,100") == (25, 50, 100)
    for bad in ("0", "50,25", "a", "25,25", ""):
        with pytest.raises(ValueError):
            parse_agents(bad)


def test_synthetic_load_fails_when_quiet_agents_go_over_budget(tmp_path: Path) -> None:
    """The old synthetic mode (--rate) judges its new goal: 0 appends over budget for the agents
    that pace themselves. A 2000-token budget at 5 appends/s cannot be kept: the command exits 1."""
    out = tmp_path / "load.json"
    run = compactd(
        *(
            "bench",
            "load",
            "--agents",
            "6",
            "--rate",
            "5",
            "--seconds",
            "4",
            "--budget",
            "2000",
            "--no-model",
        ),
        *("--json", str(out)),
    )
    assert run.returncode == 1, run.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["quiet_appends_over_budget"] > 0
    assert "quiet_appends_over_budget" in r["missed"]
    assert "goal missed: quiet_appends_over_budget" in run.stderr


def test_a_stall_says_whether_load_or_the_turn_made_it() -> None:
    """budget 24 000, high watermark 20 400: a context over its high watermark before the turn (in
    the reserve) is a compaction owed and not landed, whatever the turn; under it, a turn that did
    not fit is the plan's (only planning earlier would have taken it)."""
    assert stall_cause(21_000, 500, 20_400, 24_000) == "behind"
    assert stall_cause(20_662, 6_135, 20_400, 24_000) == "behind"  # stop 40: the scheduler's, not the turn's
    assert stall_cause(20_400, 3_601, 20_400, 24_000) == "turn_over_headroom"  # at the high watermark
    assert stall_cause(19_292, 6_173, 20_400, 24_000) == "turn_over_headroom"
    assert stall_cause(20_000, 3_000, 20_400, 24_000) == "other"  # it fit: the stall was something else


@pytest.mark.parametrize("attach", ["appends", "snapshot"])
async def test_an_agent_sends_its_history_one_turn_at_a_time_or_in_one_snapshot(
    tmp_path: Path, attach: str
) -> None:
    """`--attach`: the history up to the agent's fill reaches a real daemon one append per turn, or
    in one SNAPSHOT: one change to the mirror, whose sections the look-ahead counts as turns for the
    agent's largest turn lately (watcher.planning.lookahead, Lookahead.history), as it counts the
    appends."""
    traj = load_many([sorted(MINI.glob("*.traj.json"))[0]], count=token_counter(False))[0]
    plan = AgentPlan("load-0000", traj, interval=5.0, fill=0.9, first_turn_s=0.0)
    proc = DaemonProcess(tmp_path, None, model=False)
    await proc.wait_ready(30)
    ctx = zmq.asyncio.Context()
    agent = LoadAgent(plan, proc.endpoint, 24_000, ctx, attach)
    try:
        await agent.start()
        sent = list(agent.link.context)
        assert agent.tally.start_tokens == agent.link.context.tokens > 0.5 * agent.tally.high
        status = (await agent.link.status())["agents"][0]
        assert (status["tokens"], status["sections"]) == (agent.tally.start_tokens, len(sent))
        largest = status["lookahead"]["largest_turn_tokens"]
        if attach == "snapshot":
            assert status["version"] == 1
            la = Lookahead()
            la.history((s.kind, s.tokens) for s in sent)
            assert largest == round(la.tail) > 0
        else:
            assert status["version"] > 1 and largest > 0
    finally:
        await agent.close()
        ctx.destroy(0)
        proc.stop()


def test_attach_is_checked() -> None:
    with pytest.raises(ValueError, match="--attach must be one of appends, snapshot"):
        TrajLoadSettings(paths=(Path("x"),), attach="stream")
