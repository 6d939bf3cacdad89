"""The evaluation harness end to end: `compactd replay` starts a real daemon with the real model,
plays a real trajectory under every policy over real ZeroMQ, plants canaries, and draws the plot."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.daemon import wait_until_sync
from watcher.eval.replay import POLICIES, ReplayError, parse_policies

REPO = Path(__file__).resolve().parents[3]
CANARIES = REPO / "bench" / "canaries.txt"
KEYS = {
    "turns",
    "budget_tokens",
    "reserve_ratio",
    "peak_utilization",
    "turns_over_high_watermark",
    "overflow_turns",
    "stall_ms_total",
    "stall_ms_p99",
    "compactions",
    "tokens_saved",
    "compression_ratio",
    "cache_invalidated_tokens",
    "cache_bust_events",
    "canary_in_context",
    "canary_recall",
    "digest_of_digest",
    "digest_larger_than_input",
    "regret",
    "summarizer_prefill_tps",
    "summarizer_decode_tps",
}
FAST = ("--budget=16000", "--turn-interval=0", "--no-model", "--no-progress")  # no model, turns back to back
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def replay(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "watcher", "replay", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory, trajectories: Path, model_path: str) -> dict[str, Any]:
    """One fast replay of the shortest trajectory (13 turns) under all four policies."""
    out = tmp_path_factory.mktemp("replay")
    # turns back to back (--turn-interval=0) leave no time for a model gist, and look-ahead would
    # rightly digest everything deterministically; off here, so the model's figures are exercised
    # (its one region here has nothing the model ranks: a gist, off by default, is asked for)
    (out / "compactd.toml").write_text(
        "[model]\ngists = true\n[compaction]\nlookahead = false\n", encoding="utf-8"
    )
    proc = replay(
        str(trajectories / "swe-agent" / "pydicom__pydicom-1458.traj"),
        f"--config={out / 'compactd.toml'}",
        "--budget=16000",
        "--reserve=0.15",
        "--turn-interval=0",
        "--stall-timeout=60",
        f"--policy={','.join(POLICIES)}",
        f"--canaries={CANARIES}",
        "--seed=3",
        f"--json={out / 'r.json'}",
        f"--plot={out / 'r.png'}",
        "--no-progress",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data: dict[str, Any] = json.loads((out / "r.json").read_text(encoding="utf-8"))
    data["_png"] = (out / "r.png").read_bytes()
    data["_stdout"] = proc.stdout
    return data


@pytest.mark.slow
def test_every_policy_reports_every_key(result: dict[str, Any]) -> None:
    assert set(result["policies"]) == set(POLICIES)
    for policy, r in result["policies"].items():
        (name,) = r["trajectories"]
        assert name == "pydicom__pydicom-1458"
        for where in (r["aggregate"], r["trajectories"][name]):
            missing = KEYS - set(where)
            assert not missing, f"{policy}: missing {missing}"
            assert where["turns"] == 12 and where["budget_tokens"] == 16000
            assert set(where["canary_in_context"]) == {"user", "tool", "assistant"}
        series = result["series"][policy][name]
        assert len(series["usage"]) == len(series["stalls_ms"]) == 12  # 13 turns, 12 LLM calls
        assert series["high_watermark"] == 13600
    assert set(json.loads(result["_stdout"])) == set(POLICIES), "stdout: the aggregates per policy"


def test_policies_behave_as_designed(result: dict[str, Any]) -> None:
    agg = {p: r["aggregate"] for p, r in result["policies"].items()}
    for policy, a in agg.items():
        assert a["digest_of_digest"] == 0, policy
        assert a["digest_larger_than_input"] == 0, policy
        if a["canary_recall"] is not None:
            assert a["canary_recall"] == 1.0, f"{policy}: the archive lost a canary"
    for policy in ("optimistic", "recency", "reactive"):
        assert agg[policy]["compactions"] >= 1, policy
        assert agg[policy]["tokens_saved"] > 0 and agg[policy]["compression_ratio"] > 1, policy
    # reactive acts only when a call would not fit: every compaction is waited for
    reactive = result["series"]["reactive"]["pydicom__pydicom-1458"]
    assert agg["reactive"]["stall_ms_total"] > 0
    for call, _ in reactive["compactions"]:
        assert reactive["stalls_ms"][call] > 0, "a reactive compaction the agent did not wait for"
    # the planners always make room in the end (stalls are waits, not overflows)
    assert agg["optimistic"]["overflow_turns"] == agg["reactive"]["overflow_turns"] == 0
    # the summarizer's speed comes from the daemon's STATUS
    assert any((a["summarizer_prefill_tps"] or 0) > 0 for a in agg.values())
    # per trajectory, the regretted sections are named: as many as the regret says, each folded
    for policy, r in result["policies"].items():
        t = r["trajectories"]["pydicom__pydicom-1458"]
        folded = t["compacted_sections"]
        assert len(set(t["regretted_ids"])) == len(t["regretted_ids"]) <= folded, policy
        assert t["regret"] == (round(len(t["regretted_ids"]) / folded, 4) if folded else 0.0), policy


def test_plot_is_a_png(result: dict[str, Any]) -> None:
    png: bytes = result["_png"]
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000


def test_bad_arguments_fail_before_starting_a_daemon(tmp_path: Path, trajectories: Path) -> None:
    traj = str(trajectories / "swe-agent" / "pydicom__pydicom-1458.traj")
    bad = replay(traj, "--policy=optimistic,lazy", timeout=60)
    assert bad.returncode == 1 and "unknown policy lazy" in bad.stderr
    missing = replay(traj, f"--canaries={tmp_path / 'none.txt'}", timeout=60)
    assert missing.returncode == 1 and "none.txt: cannot read" in missing.stderr
    jobs = replay(traj, "--jobs=0", timeout=60)
    assert jobs.returncode == 1 and "--jobs must be at least 1" in jobs.stderr


@pytest.mark.slow
def test_jobs_play_trajectories_at_once_and_report_them_in_order(tmp_path: Path, trajectories: Path) -> None:
    paths = [
        str(trajectories / "swe-agent" / "pydicom__pydicom-1458.traj"),
        str(trajectories / "mini-swe-agent" / "scikit-learn__scikit-learn-25102.traj.json"),
    ]
    proc = replay(*paths, *FAST, "--policy=optimistic,reactive", "--jobs=2", f"--json={tmp_path / 'r.json'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    names = data["settings"]["trajectories"]
    assert names == ["pydicom__pydicom-1458", "scikit-learn__scikit-learn-25102"]
    for policy in ("optimistic", "reactive"):
        assert list(data["policies"][policy]["trajectories"]) == names
        agg = data["policies"][policy]["aggregate"]
        assert agg["trajectories"] == 2
        assert agg["turns"] == sum(data["policies"][policy]["trajectories"][n]["turns"] for n in names)
        assert agg["overflow_turns"] == 0 and agg["compactions"] >= 1, policy


def test_parse_policies() -> None:
    assert parse_policies(" reactive , masking ") == ("reactive", "masking")
    with pytest.raises(ReplayError, match="listed twice"):
        parse_policies("masking,masking")
    with pytest.raises(ReplayError, match="unknown policy"):
        parse_policies(",")


async def test_plot_from_saved_json(result: dict[str, Any], tmp_path: Path) -> None:
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps({k: v for k, v in result.items() if not k.startswith("_")}), encoding="utf-8")
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "watcher.eval.plot", str(saved), str(tmp_path / "again.png")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "again.png").read_bytes().startswith(PNG_MAGIC)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text(encoding="ascii")
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _socket_of(pid: int) -> str | None:
    """The --socket argument of a `compactd run` process; None before its exec (or if it has none)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return None
    return args[args.index("--socket") + 1] if "--socket" in args else None


def _attached(endpoint: str) -> bool:
    """Whether the daemon at ``endpoint`` answers STATUS with an attached agent."""
    cmd = [sys.executable, "-m", "watcher", "status", "--socket", endpoint, "--json", "--timeout", "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    return out.returncode == 0 and bool(json.loads(out.stdout)["agents"])


def test_sigterm_stops_the_daemon_it_started(trajectories: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "watcher",
            "replay",
            str(trajectories / "swe-agent" / "pydicom__pydicom-1458.traj"),
            "--turn-interval=1",
            "--no-model",
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        daemons = wait_until_sync(lambda: _children(proc.pid), 30, "replay starts a daemon")
        assert daemons, "replay started no daemon"
        endpoint = wait_until_sync(lambda: _socket_of(daemons[0]), 30, "the daemon's command line")
        wait_until_sync(lambda: _attached(endpoint), 60, "the replayed agent is attached and playing")
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1 and "stopped by SIGTERM" in err
    for pid in daemons:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().split()[2] == "Z", f"daemon {pid} still running"


@pytest.mark.slow
def test_rounds_report_each_round_and_the_regret_ratio_as_median_and_range(
    tmp_path: Path, trajectories: Path
) -> None:
    traj = str(trajectories / "mini-swe-agent" / "scikit-learn__scikit-learn-25102.traj.json")
    proc = replay(traj, *FAST, "--policy=optimistic,recency", "--rounds=3", f"--json={tmp_path / 'r.json'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    name = "scikit-learn__scikit-learn-25102"
    assert data["settings"]["trajectories"] == [name, f"{name}#2", f"{name}#3"]
    assert len(data["rounds"]) == 3 and all(set(r) == {"optimistic", "recency"} for r in data["rounds"])
    assert data["policies"]["optimistic"]["aggregate"]["turns"] == sum(
        r["optimistic"]["turns"] for r in data["rounds"]
    )
    ratio = data["ratios"]["regret optimistic / recency"]
    per_round = [r["optimistic"]["regret"] / r["recency"]["regret"] for r in data["rounds"]]
    assert ratio["rounds"] == [round(x, 3) for x in per_round]
    assert ratio["min"] <= ratio["median"] <= ratio["max"]
