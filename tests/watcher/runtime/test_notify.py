"""sd_notify end to end: a real daemon subprocess talks to a NOTIFY_SOCKET this test owns, the way
systemd would see it (READY after bind + model load, WATCHDOG from the loop, STATUS, RELOADING +
MONOTONIC_USEC then READY on SIGHUP, STOPPING on SIGTERM)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import status_json
from watcher.eval.harness import DaemonProcess, NotifySocket

Systemd = NotifySocket  # what the daemon under test sees as systemd

WATCHDOG_USEC = 400_000  # pings every 0.2 s


@pytest.fixture
def systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Systemd]:
    sd = Systemd(str(tmp_path / "notify.sock"))
    monkeypatch.setenv("NOTIFY_SOCKET", sd.address)
    monkeypatch.setenv("WATCHDOG_USEC", str(WATCHDOG_USEC))
    monkeypatch.delenv("WATCHDOG_PID", raising=False)  # the daemon is not this process
    try:
        yield sd
    finally:
        sd.close()


def monotonic_usec() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def test_notify_lifecycle_without_model(systemd: Systemd, tmp_path: Path) -> None:
    cfg = tmp_path / "compactd.toml"
    cfg.write_text("[daemon]\nheartbeat_s = 0.5\nagent_timeout_s = 2.0\n")  # STATUS every 0.5 s
    daemon = DaemonProcess(tmp_path, str(cfg), model=False)
    sock_file = tmp_path / "agents.sock"
    try:
        first = systemd.wait("EXTEND_TIMEOUT_USEC", within=60)
        assert int(first["EXTEND_TIMEOUT_USEC"]) >= 60_000_000
        assert systemd.got[0][1] is first  # the very first thing systemd hears
        ready = systemd.wait("READY", "1")
        assert sock_file.exists(), "READY=1 before the socket was bound"
        assert "agent(s)" in ready["STATUS"]

        later = systemd.collect(1.5)
        pings = [m for m in later if m.get("WATCHDOG") == "1"]
        assert len(pings) >= 4, later  # every WATCHDOG_USEC/2 from the event loop
        assert any("STATUS" in m and "worst headroom" in m["STATUS"] for m in later), later

        before = monotonic_usec()
        daemon.proc.send_signal(signal.SIGHUP)
        reloading = systemd.wait("RELOADING", "1", within=10)
        after = monotonic_usec()
        assert before <= int(reloading["MONOTONIC_USEC"]) <= after  # CLOCK_MONOTONIC, as systemd wants
        systemd.wait("READY", "1", within=10)  # the reload is done
        assert daemon.proc.poll() is None

        daemon.proc.send_signal(signal.SIGTERM)
        systemd.wait("STOPPING", "1", within=10)
        assert daemon.proc.wait(30) == 0
    finally:
        daemon.stop()
    # after STOPPING no more pings: the loop is gone
    assert not [m for m in systemd.collect(0.6) if m.get("WATCHDOG")]


async def test_ready_only_after_the_model_is_loaded(
    systemd: Systemd, tmp_path: Path, model_path: str
) -> None:
    daemon = DaemonProcess(tmp_path, None, model=True)
    try:
        await asyncio.to_thread(systemd.wait, "EXTEND_TIMEOUT_USEC", None, 60)
        await asyncio.to_thread(systemd.wait, "READY", "1", 120)
        st = (await asyncio.to_thread(status_json, daemon.endpoint))["daemon"]  # answered at once: it is up
        assert st["degraded"] is False  # and the model is in service
        log = daemon.log_path.read_text()
        assert model_path in log and '"event": "ready"' in log
    finally:
        assert daemon.stop() == 0
