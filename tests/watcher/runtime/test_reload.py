"""SIGHUP reloads on a real daemon subprocess: valid changes apply, invalid files change nothing,
restart-only keys are reported, attached agents stay attached, the model can be swapped."""

from __future__ import annotations

import asyncio
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ipc.client import AgentLink
from ipc.sections import Section
from tests.fixtures.daemon import log_events, status, wait_event
from watcher.eval.harness import DaemonProcess

BASE = """\
[daemon]
log_level = "info"

[compaction]
reserve = 0.15

[agents."r-1"]
budget = 3000
"""


def tool_output(i: int) -> Section:
    return Section(f"s{i}", "tool_result", "".join(f"row {i}.{j}: v={i * 7 + j}\n" for j in range(12)))


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[DaemonProcess, Path]]:
    cfg = tmp_path / "compactd.toml"
    cfg.write_text(BASE)
    daemon = DaemonProcess(tmp_path, str(cfg), model=False)
    try:
        await daemon.wait_ready(60)
        yield daemon, cfg
    finally:
        daemon.stop()


async def test_valid_change_is_applied_and_agents_stay(setup: tuple[DaemonProcess, Path]) -> None:
    daemon, cfg = setup
    async with AgentLink(daemon.endpoint, agent="r-1", budget=5000) as link:
        assert link.welcome["budget"] == 3000 and link.welcome["policy"] == "auto"
        for i in range(4):
            await link.append(tool_output(i), wait=True)
        before = (await link.status())["agents"][0]

        cfg.write_text(
            BASE.replace('log_level = "info"', 'log_level = "debug"').replace("0.15", "0.25")
            + 'policy = "off"\n'
        )
        daemon.proc.send_signal(signal.SIGHUP)
        done = await wait_event(daemon, "reloaded")
        assert set(done["changed"]) == {"daemon.log_level", "compaction.reserve", "agents.r-1"}

        after = (await link.status())["agents"][0]  # the same link, the same mirror
        assert after["policy"] == "off"
        for key in ("session", "version", "tokens", "sections"):
            assert after[key] == before[key], key
        for i in range(4, 200):  # policy off: past the high watermark and no proposal comes
            await link.append(tool_output(i), wait=True)
            if (await link.status())["agents"][0]["tokens"] > 3000:
                break
        with pytest.raises(TimeoutError):  # no proposal comes (waited for, with a deadline)
            await asyncio.wait_for(link.proposals.get(), 0.3)
        assert (await link.status())["agents"][0]["tokens"] > 3000

        async with AgentLink(daemon.endpoint, agent="new-1", budget=4000) as other:
            assert other.welcome["reserve"] == 0.25  # [compaction] defaults apply to new agents
    st = await status(daemon)
    assert st["daemon"]["reloads"] == {"ok": 1, "failed": 0}
    assert log_events(daemon, "agent_settings_changed")[0]["policy"] == "off"


async def test_invalid_file_keeps_the_running_config(setup: tuple[DaemonProcess, Path]) -> None:
    daemon, cfg = setup
    async with AgentLink(daemon.endpoint, agent="keep-1", budget=4000) as link:
        await link.append(tool_output(0), wait=True)
        cfg.write_text(BASE.replace("reserve = 0.15", "reserve = 1.5"))
        daemon.proc.send_signal(signal.SIGHUP)
        failed = await wait_event(daemon, "reload_failed")
        line = BASE.splitlines().index("reserve = 0.15") + 1
        assert failed["error"].startswith(f"{cfg}:{line}: compaction.reserve: must be a number in (0, 1)")
        assert failed["level"] == "error"

        cfg.write_text(BASE + "[compaction\n")  # broken TOML
        daemon.proc.send_signal(signal.SIGHUP)
        failed = await wait_event(daemon, "reload_failed", 2)
        assert "invalid TOML" in failed["error"]

        cfg.write_text(BASE + "[agents.r-2]\nbudgett = 5000\n")  # a typo
        daemon.proc.send_signal(signal.SIGHUP)
        failed = await wait_event(daemon, "reload_failed", 3)
        assert "agents.r-2.budgett: unknown key (did you mean 'budget'?)" in failed["error"]

        assert (await link.status())["agents"][0]["agent"] == "keep-1"  # still attached
        async with AgentLink(daemon.endpoint, agent="new-2", budget=4000) as other:
            assert other.welcome["reserve"] == 0.15  # the old config is in force
        st = await status(daemon)
        assert st["daemon"]["reloads"] == {"ok": 0, "failed": 3}

        cfg.write_text(BASE.replace("0.15", "0.2"))  # fixed: the next reload works
        daemon.proc.send_signal(signal.SIGHUP)
        await wait_event(daemon, "reloaded")
        async with AgentLink(daemon.endpoint, agent="new-3", budget=4000) as other:
            assert other.welcome["reserve"] == 0.2
    assert log_events(daemon, "reloaded")[0]["changed"] == ["compaction.reserve"]


async def test_restart_required_keys_are_reported_and_kept(setup: tuple[DaemonProcess, Path]) -> None:
    daemon, cfg = setup
    cfg.write_text(
        BASE.replace("[daemon]\n", "[daemon]\nmax_frame_bytes = 65536\n").replace("0.15", "0.3")
        + '\n[metrics]\nlisten = "127.0.0.1:9"\n'
    )
    daemon.proc.send_signal(signal.SIGHUP)
    warn = await wait_event(daemon, "reload_needs_restart")
    assert set(warn["keys"]) == {"daemon.max_frame_bytes", "metrics.listen"}
    assert "restart" in warn["hint"]
    done = await wait_event(daemon, "reloaded")
    assert done["changed"] == ["compaction.reserve"]  # the rest was applied
    async with AgentLink(daemon.endpoint, agent="rr-1", budget=4000) as link:
        assert link.welcome["reserve"] == 0.3
        assert link.welcome["max_frame"] == 16 * 1024 * 1024  # still the running value
    st = await status(daemon)
    assert st["daemon"]["metrics"] is None  # no exporter was started by a reload


@pytest.mark.slow
async def test_model_is_swapped_on_reload(tmp_path: Path, model_path: str) -> None:
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(model_path, copy)
    not_gguf = tmp_path / "broken.gguf"
    not_gguf.write_bytes(b"not a model at all")
    cfg = tmp_path / "compactd.toml"
    cfg.write_text(f'[model]\npath = "{model_path}"\n')
    daemon = DaemonProcess(tmp_path, str(cfg), model=True)
    try:
        await daemon.wait_ready(120)
        async with AgentLink(daemon.endpoint, agent="m-1", budget=4000) as link:
            await link.append(tool_output(0), wait=True)

            cfg.write_text(f'[model]\npath = "{copy}"\n')
            daemon.proc.send_signal(signal.SIGHUP)
            done = await wait_event(daemon, "reloaded", within=120)
            assert done["changed"] == ["model.path"]
            st = (await status(daemon))["daemon"]
            assert st["model"] == str(copy) and st["degraded"] is False

            cfg.write_text(f'[model]\npath = "{not_gguf}"\n')
            daemon.proc.send_signal(signal.SIGHUP)
            failed = await wait_event(daemon, "reload_failed", within=60)
            assert failed["error"].startswith("model: ") and "not a GGUF file" in failed["error"]
            st = (await status(daemon))["daemon"]
            assert st["model"] == str(copy) and st["degraded"] is False  # the old one still serves

            cfg.write_text(f'[model]\npath = "{copy}"\nenabled = false\n')
            daemon.proc.send_signal(signal.SIGHUP)
            await wait_event(daemon, "reloaded", 2, within=60)
            st = (await status(daemon))["daemon"]
            assert st["degraded"] is True and st["degraded_reason"] == "no model"
            await wait_event(daemon, "engine_retired", within=60)
            assert (await link.status())["agents"][0]["agent"] == "m-1"
    finally:
        assert daemon.stop() == 0
