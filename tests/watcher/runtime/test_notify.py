"""sd_notify end to end: a real daemon subprocess talks to a NOTIFY_SOCKET this test owns, the way
systemd would see it (READY after bind + model load, WATCHDOG from the loop, STATUS, RELOADING +
MONOTONIC_USEC then READY on SIGHUP, STOPPING on SIGTERM)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from watcher.eval.harness import DaemonProcess

WATCHDOG_USEC = 400_000  # pings every 0.2 s


class Systemd:
    """The receiving end of $NOTIFY_SOCKET: every datagram, parsed, with its arrival time."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.path = path
        self.got: list[tuple[float, dict[str, str]]] = []

    def recv(self, within: float) -> dict[str, str] | None:
        self.sock.settimeout(max(0.01, within))
        try:
            data = self.sock.recv(4096)
        except TimeoutError:
            return None
        msg = dict(line.split("=", 1) for line in data.decode().split("\n"))
        self.got.append((time.monotonic(), msg))
        return msg

    def wait(self, key: str, value: str | None = None, within: float = 30.0) -> dict[str, str]:
        deadline = time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0:
            msg = self.recv(left)
            if msg is not None and key in msg and (value is None or msg[key] == value):
                return msg
        raise AssertionError(f"no {key}={value or '*'} within {within} s; got {[m for _, m in self.got]}")

    def collect(self, seconds: float) -> list[dict[str, str]]:
        out = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if (msg := self.recv(left)) is not None:
                out.append(msg)
        return out


@pytest.fixture
def systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Systemd]:
    sd = Systemd(tmp_path / "notify.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", str(sd.path))
    monkeypatch.setenv("WATCHDOG_USEC", str(WATCHDOG_USEC))
    monkeypatch.delenv("WATCHDOG_PID", raising=False)  # the daemon is not this process
    try:
        yield sd
    finally:
        sd.sock.close()


def status_json(endpoint: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "watcher", "status", "--socket", endpoint, "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    data: dict[str, object] = json.loads(out.stdout)["daemon"]
    return data


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
        st = await asyncio.to_thread(status_json, daemon.endpoint)  # answered at once: it is up
        assert st["degraded"] is False  # and the model is in service
        log = daemon.log_path.read_text()
        assert model_path in log and '"event": "ready"' in log
    finally:
        assert daemon.stop() == 0
