"""The operator's commands, run as a user would: `compactd ...` subprocesses, exit codes, output."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ipc.client import AgentLink
from ipc.sections import Section
from watcher.cli.console import render_status
from watcher.eval.harness import DaemonProcess

COMMANDS = ("run", "status", "agents", "config", "replay")


def compactd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "watcher", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


async def acompactd(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(compactd, *args)


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProcess]:
    proc = DaemonProcess(tmp_path, None, model=False)
    try:
        await proc.wait_ready(60)
        yield proc
    finally:
        proc.stop()


def test_help_explains_commands_and_exit_codes() -> None:
    out = compactd("--help")
    assert out.returncode == 0
    for word in (*COMMANDS, "exit codes", "getting started", "compactd.toml"):
        assert word in out.stdout, word
    for cmd in COMMANDS:
        sub = compactd(cmd, "--help")
        assert sub.returncode == 0, cmd
        assert sub.stdout.startswith(f"usage: compactd {cmd}")
    run_help = compactd("run", "--help").stdout
    assert "--metrics ADDR:PORT" in run_help and "--mqtt URL" in run_help


def test_usage_errors_exit_2() -> None:
    assert compactd().returncode == 2
    assert compactd("frobnicate").returncode == 2
    bad = compactd("run", "--metrics", "localhost")
    assert bad.returncode == 2 and "--metrics: not HOST:PORT: 'localhost'" in bad.stderr
    bad = compactd("run", "--mqtt", "http://127.0.0.1:1883")
    assert bad.returncode == 2 and "--mqtt: not mqtt://HOST[:PORT]" in bad.stderr


def test_config_check(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[3] / "docs" / "compactd.example.toml"
    ok = compactd("config", "check", str(example))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(f"{example}: ok")

    good = tmp_path / "good.toml"
    good.write_text('[metrics]\nlisten = "127.0.0.1:9464"\n[agents.coder]\npolicy = "manual"\n')
    out = compactd("config", "check", str(good))
    assert out.returncode == 0 and "127.0.0.1:9464" in out.stdout and "coder" in out.stdout

    bad = tmp_path / "bad.toml"
    bad.write_text("[compaction]\nreserve = 0.15\nlow_watermark = 2\n")
    out = compactd("config", "check", str(bad))
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == (
        f"compactd: error: {bad}:3: compaction.low_watermark: must be a number in (0, 1), got 2"
    )

    missing = compactd("config", "check", str(tmp_path / "nope.toml"))
    assert missing.returncode == 1 and "no such file" in missing.stderr
    assert compactd("config").returncode == 2  # the subcommand is required

    # without FILE: what `compactd run` would load (here $COMPACTD_CONFIG plus an override)
    env = {**os.environ, "COMPACTD_CONFIG": str(good), "COMPACTD_COMPACTION_RESERVE": "0.3"}
    out = compactd("config", "check", env=env)
    assert out.returncode == 0, out.stderr
    assert f"{good} + $COMPACTD_COMPACTION_RESERVE: ok" in out.stdout and "reserve 0.3" in out.stdout
    env["COMPACTD_COMPACTION_RESERVE"] = "lots"
    out = compactd("config", "check", env=env)
    assert out.returncode == 1 and "$COMPACTD_COMPACTION_RESERVE: compaction.reserve" in out.stderr


def test_run_with_an_invalid_config_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[daemon]\nlog_levle = 'info'\n")
    out = compactd("run", "--config", str(bad), "--no-model", "--socket", f"ipc://{tmp_path}/x.sock")
    assert out.returncode == 1
    assert f"{bad}:2: daemon.log_levle: unknown key (did you mean 'log_level'?)" in out.stderr


async def test_agents_and_status_against_a_daemon(daemon: DaemonProcess) -> None:
    empty = await acompactd("agents", "--socket", daemon.endpoint)
    assert empty.returncode == 0 and empty.stdout.strip() == "no agents attached"
    assert json.loads((await acompactd("agents", "--socket", daemon.endpoint, "--json")).stdout) == []

    async with (
        AgentLink(daemon.endpoint, agent="cli-busy", budget=2000) as busy,
        AgentLink(daemon.endpoint, agent="cli-idle", budget=100_000, policy="manual") as idle,
    ):
        await busy.append(Section("a", "user", "fix the tests " * 200), wait=True)
        await idle.append(Section("b", "user", "hello"), wait=True)

        out = await acompactd("agents", "--socket", daemon.endpoint, "--json")
        assert out.returncode == 0
        rows = {a["agent"]: a for a in json.loads(out.stdout)}
        assert set(rows) == {"cli-busy", "cli-idle"}
        assert rows["cli-idle"]["policy"] == "manual" and rows["cli-busy"]["budget"] == 2000

        table = (await acompactd("agents", "--socket", daemon.endpoint)).stdout.splitlines()
        assert table[0].split()[:5] == ["AGENT", "POLICY", "TOKENS", "BUDGET", "USAGE"]
        assert table[1].startswith("cli-busy") and table[2].startswith("cli-idle")  # least headroom first
        assert "100,000" in table[2] and "manual" in table[2]

        st = await acompactd("status", "--socket", daemon.endpoint)
        assert st.returncode == 0
        lines = st.stdout.splitlines()
        assert (
            lines[0].startswith("compactd up ") and "2 agent(s)" in lines[0] and "worst headroom" in lines[0]
        )
        text = st.stdout
        assert f"endpoint  {daemon.endpoint}" in text
        assert "model     DEGRADED: no model" in text  # --no-model, said plainly
        assert "metrics   off" in text and "mqtt      off" in text
        assert "cli-busy" in text and "cli-idle" in text


def test_no_daemon_exits_3(tmp_path: Path) -> None:
    for cmd in ("status", "agents"):
        out = compactd(cmd, "--socket", f"ipc://{tmp_path}/none.sock")
        assert out.returncode == 3, cmd
        assert "no daemon at" in out.stderr and "does not exist" in out.stderr
    stale = tmp_path / "stale.sock"  # a socket file nobody listens on
    stale.touch()
    out = compactd("status", "--socket", f"ipc://{stale}", "--timeout", "0.5")
    assert out.returncode == 3 and "no answer" in out.stderr and "is compactd running?" in out.stderr


def test_readme_configuration_reference_is_complete() -> None:
    """Every config key has a row in the README's reference; "restart" exactly for RESTART_REQUIRED."""
    import dataclasses

    from watcher.config import settings as config

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    reference = readme[readme.index("## Configuration reference") :]
    rows = {}
    for line in reference.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and "." in cells[0]:
            rows[cells[0].strip("`")] = cells
    keys = {
        f"{name}.{f.name}"
        for name in ("daemon", "model", "compaction", "metrics", "mqtt", "store")
        for f in dataclasses.fields(type(getattr(config.Config(), name)))
    }
    assert keys - rows.keys() == set(), "README lacks these keys"
    assert rows.keys() - keys == set(), "README documents keys that do not exist"
    for key, cells in rows.items():
        assert (cells[3] == "restart") == (key in config.RESTART_REQUIRED), key


def test_status_text_says_which_weights_are_in_use() -> None:
    ok = {"daemon": {"uptime_s": 1, "weights": {"requested": "q4_0", "in_use": "q4_0", "error": ""}}}
    assert "  weights   q4_0 (asked: q4_0)" in render_status(ok)
    failed = {"requested": "q4_0", "in_use": "shipped", "error": "cache not writable"}
    text = render_status({"daemon": {"uptime_s": 1, "weights": failed}})
    assert "  weights   shipped (asked: q4_0); re-encoding failed: cache not writable" in text
    assert "weights" not in render_status({"daemon": {"uptime_s": 1, "weights": None}})


def test_status_text_says_which_digest_methods_ran_and_who_is_degraded() -> None:
    methods = {"model": 3, "deterministic": 9, "masking": 2, "headtail": 1, "agents_degraded": 1}
    methods["model_skipped"] = {"busy": 4, "deadline": 0, "degraded": 3}
    agents = [{"agent": "a1", "degraded": "masking"}, {"agent": "a2", "degraded": "normal"}]
    text = render_status({"daemon": {"uptime_s": 1, "digest_methods": methods}, "agents": agents})
    line = "  digests   model 3 · deterministic 9 · masking 2 · headtail 1"
    line += " · model skipped: busy 4, degraded 3"
    assert line + " · 1 agent(s) degraded under load" in text
    rows = {r.split()[0]: r for r in text.splitlines() if r.startswith(("a1", "a2"))}
    assert rows["a1"].endswith("ok, degraded: masking") and rows["a2"].endswith(" ok")
