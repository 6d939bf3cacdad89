"""Logs: JSON lines off a TTY, readable lines on one, the agent id bound to what happens for it."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from ipc.client import AgentLink
from ipc.sections import Section
from summarizer.digest import Summarizer
from tests.fixtures.server import serving
from watcher.config.settings import Config
from watcher.eval.harness import daemon_argv
from watcher.observe import logs
from watcher.serve.server import Server


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """The daemon's logging set up (JSON) into a buffer; the process's logging restored after."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buf)
    logs.configure("info", "json")
    try:
        yield buf
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
        structlog.reset_defaults()


def lines(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]


async def test_agent_id_is_bound_to_everything_a_frame_causes(tmp_path: Path, captured: io.StringIO) -> None:
    """A listener that fails is logged (with the agent, from the frame's context) and serving goes on."""

    def broken(kind: str, agent: str | None, fields: dict[str, Any]) -> None:
        raise RuntimeError(f"listener bug on {kind}")

    async with serving(tmp_path, lambda sock: Server(sock, Config(), Summarizer(None))) as s:
        s.server.add_listener(broken)
        async with AgentLink(
            s.endpoint, agent="ctx-agent", budget=3000, reserve=0.2, zmq_context=s.ctx
        ) as link:
            for i in range(200):
                text = "".join(f"row {i}.{j}: value={i * 31 + j}\n" for j in range(12))
                await link.append(Section(f"s{i}", "tool_result", text), wait=True)
                if not link.proposals.empty():
                    break
            p = await asyncio.wait_for(link.proposals.get(), 10)
            assert await link.apply(p)
            assert (await link.status())["agents"][0]["compactions"] == 1  # serving went on
    failed = [e for e in lines(captured) if e["event"] == "listener_failed"]
    assert {e["kind"] for e in failed} >= {"proposal_sent", "proposal_applied"}
    assert all(e["agent"] == "ctx-agent" for e in failed)  # bound by the server, not passed by the call
    assert all("RuntimeError: listener bug" in e["exception"] for e in failed)


def test_stdlib_loggers_share_the_pipeline(captured: io.StringIO) -> None:
    logging.getLogger("compactd.mqtt").warning("broker said %s", "no")
    with structlog.contextvars.bound_contextvars(agent="a-1"):
        logging.getLogger("asyncio").error("loop trouble")
    logging.getLogger("compactd.mqtt").debug("below the level: dropped")
    got = lines(captured)
    assert [(e["logger"], e["event"], e["level"]) for e in got] == [
        ("compactd.mqtt", "broker said no", "warning"),
        ("asyncio", "loop trouble", "error"),
    ]
    assert got[1]["agent"] == "a-1" and "timestamp" in got[0]


def test_console_output_on_a_tty(tmp_path: Path) -> None:
    """On a terminal the daemon writes readable lines, not JSON (systemd gets JSON: no TTY)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        daemon_argv(f"ipc://{tmp_path}/t.sock", tmp_path / "st"),
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    out = b""
    try:
        deadline = time.monotonic() + 60
        while b"ready" not in out and time.monotonic() < deadline:
            try:
                out += os.read(master, 65536)
            except OSError:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        os.close(master)
    text = out.decode(errors="replace")
    ready = next(line for line in text.splitlines() if "ready" in line)
    assert not ready.lstrip().startswith("{"), text
    assert "[info" in ready and "endpoint=" in ready


def test_a_logger_used_before_a_reload_follows_its_level_and_format(
    captured: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module's logger is bound and cached on its first line; a reload's level and format still
    reach it (the daemon's own lines do not go through the standard library's level)."""
    monkeypatch.setattr(sys, "stderr", captured)  # (pytest swapped its own in between setup and call)
    log = logs.get("compactd.reloaded")
    log.info("first", n=1)
    log.debug("below the level: dropped")
    logs.configure("debug", "json")
    log.debug("now shown", n=2)
    log.warning("formatted %s of %d", "one", 2)
    logs.configure("warning", "console")
    log.info("below the new level: dropped")
    log.warning("readable", n=3)
    got = lines(captured)
    assert [(e["event"], e["level"], e["logger"]) for e in got] == [
        ("first", "info", "compactd.reloaded"),
        ("now shown", "debug", "compactd.reloaded"),
        ("formatted one of 2", "warning", "compactd.reloaded"),
    ]
    console = captured.getvalue().splitlines()[-1]
    assert "readable" in console and "n=3" in console and not console.startswith("{")


def test_a_closed_stderr_loses_the_line_not_the_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    """journald gone, stderr closed: logging a line must not raise into the caller."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    gone = io.StringIO()
    monkeypatch.setattr(sys, "stderr", gone)
    logs.configure("info", "json")
    gone.close()
    try:
        logs.get("compactd.closed").info("into a closed stream", n=1)
        logs.get("compactd.closed").error("and an error", n=2)
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
        structlog.reset_defaults()
