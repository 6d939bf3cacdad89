"""`compactd bench ingest` runs end to end (tiny settings) and reports the keys the issue asks for;
its patched-in-place frames are valid, consecutive DELTAs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ipc.context import Context
from ipc.protocol import decode, parse_delta, parse_ops
from ipc.sections import Section
from watcher.eval.bench.ingest import BENCH_SECTIONS, START_VERSION, DeltaStream, context_sections
from watcher.serve import wire

pytestmark = pytest.mark.serial  # races the machine's own speed (tests/conftest.py)


def test_frames_are_consecutive_deltas_that_keep_the_context_size() -> None:
    sections = [Section.from_wire(s, 1 << 20) for s in context_sections(10_000)]
    ctx = Context(sections, START_VERSION)
    tokens = ctx.tokens
    stream = DeltaStream()
    for k in range(3 * BENCH_SECTIONS):
        msg = decode(stream.next_frame())
        assert (msg["id"], msg["base"], msg["version"]) == (k + 1, ctx.version, ctx.version + 1)
        ctx.apply_ops(parse_ops(msg, 1 << 20), msg["version"])
    assert ctx.tokens == tokens == 10_000 and len(ctx) == len(sections)


def test_bench_frames_take_the_daemons_fast_path() -> None:
    """The bench measures the path real DELTAs take: watcher.serve.wire, not the reference validator."""
    stream = DeltaStream()
    for _ in range(3):
        frame = stream.next_frame()
        msg = decode(frame)
        assert wire.decode_delta(frame, 1 << 24) == (msg["id"], *parse_delta(msg, 1 << 24))


def test_bench_ingest_cli_reports_the_figures(tmp_path: Path) -> None:
    out = tmp_path / "ingest.json"
    cmd = [sys.executable, "-m", "watcher", "bench", "ingest", "--agents", "2", "--seconds", "0.3"]
    run = subprocess.run(
        [*cmd, "--rounds", "3", "--json", str(out)], capture_output=True, text=True, timeout=300, check=False
    )
    data = json.loads(out.read_text())
    assert run.returncode == (0 if data["goals_met"] else 1), run.stderr[-2000:]
    for key in (
        "daemon_deltas_per_s",
        "raw_pyzmq_msgs_per_s",
        "ratio_vs_raw",
        "p50_ms",
        "p99_ms",
        "per_delta_cost_ratio_1m_vs_10k",
        "daemon_cpu_us_per_delta",
        "raw_server_cpu_us_per_msg",
    ):
        assert isinstance(data[key], (int, float)) and data[key] > 0, key
    assert data["p50_ms"] <= data["p99_ms"]
    for key in ("ratio_vs_raw", "per_delta_cost_ratio_1m_vs_10k"):  # median and range of 3 rounds
        sp = data[f"{key}_spread"]
        assert len(sp["rounds"]) == 3 and sp["min"] <= sp["median"] == data[key] <= sp["max"]
        assert data["goals"][key]["measured"] == data[key]
    assert set(data["goals"]) == {"ratio_vs_raw", "per_delta_cost_ratio_1m_vs_10k"}
    assert data["missed"] == [k for k, g in data["goals"].items() if not g["met"]]
