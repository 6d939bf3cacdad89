"""`compactd bench proxy` end to end on a short replay: the JSON has the issue's figures, and a
run that does not exercise a goal (here: 100 turns) exits non-zero."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from watcher.eval.bench.chats import anthropic_turns, openai_turns
from watcher.eval.trajectories import load

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

KEYS = (
    "requests",
    "accepted",
    "max_request_tokens",
    "window_tokens",
    "waited_requests",
    "prefix_kept_fraction",
    "added_latency_ms_p99",
)


def test_short_replay_reports_and_fails_the_unexercised_goal(tmp_path: Path) -> None:
    out = tmp_path / "proxy.json"
    cmd = [sys.executable, "-m", "watcher", "bench", "proxy", "--api", "anthropic", "--turns", "2"]
    cmd += ["--latency-rounds", "3", "--no-model", "--workdir", str(tmp_path), "--json", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=850, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    result = json.loads(out.read_text())
    for key in KEYS:
        assert key in result, key
    assert result["requests"] == 3 and result["accepted"] == 3, result["errors"]
    assert 0 < result["max_request_tokens"] <= result["window_tokens"] == 32768
    assert result["waited_requests"] == 0
    replayed = result["goals"]["requests replayed (100 turns + 1)"]
    assert replayed["met"] is False and replayed["measured"] == 3, replayed
    assert result["goals_met"] is False and "requests replayed (100 turns + 1)" in result["missed"]
    assert "goal missed: requests replayed (100 turns + 1)" in run.stderr


def test_trajectories_become_valid_conversations(trajectories: Path) -> None:
    """Every tool call is answered right after it; Anthropic roles alternate."""
    for path in sorted(p for p in trajectories.rglob("*") if p.suffix in (".json", ".jsonl", ".traj")):
        for traj in load(path):
            flat = [m for turn in openai_turns(traj) for m in turn]
            waiting: set[str] = set()
            for m in flat:
                if m["role"] == "tool":
                    waiting.discard(m["tool_call_id"])
                else:
                    assert not waiting, f"{traj.name}: a call without its result"
                    waiting = {c["id"] for c in m.get("tool_calls", [])}
            _, turns = anthropic_turns(traj)
            roles = [m["role"] for turn in turns for m in turn]
            assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))
