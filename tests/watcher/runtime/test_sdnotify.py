"""watcher.runtime.sdnotify against a real AF_UNIX datagram socket standing in for systemd."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.daemon import wait_until
from watcher.runtime.sdnotify import (
    MAX_DATAGRAM,
    SEND_TIMEOUT_S,
    Notifier,
    watchdog_interval,
    watchdog_loop,
)

# sockaddr_un.sun_path is 108 bytes including the NUL.
MAX_SUN_PATH = 107


def _recv(sock: socket.socket, timeout: float = 2.0) -> str:
    sock.settimeout(timeout)
    return sock.recv(MAX_DATAGRAM + 1).decode()


def _drain(sock: socket.socket) -> list[str]:
    """Every datagram waiting right now."""
    sock.setblocking(False)
    out = []
    try:
        while True:
            out.append(sock.recv(MAX_DATAGRAM + 1).decode())
    except BlockingIOError:
        return out


@pytest.fixture
def socket_path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "notify.sock"
    if len(os.fsencode(path)) <= MAX_SUN_PATH:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="sdn") as short:  # long tmp_path: a short one
        yield Path(short) / "notify.sock"


@pytest.fixture
def systemd(socket_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A bound datagram socket, advertised in $NOTIFY_SOCKET."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(socket_path))
    monkeypatch.setenv("NOTIFY_SOCKET", str(socket_path))
    yield sock
    sock.close()


@pytest.fixture
def notifier(systemd: socket.socket) -> Iterator[Notifier]:
    n = Notifier.from_env()
    yield n
    n.close()


def test_from_env_enabled(notifier: Notifier, socket_path: Path) -> None:
    assert notifier.enabled
    assert notifier.address == str(socket_path)


def test_ready(notifier: Notifier, systemd: socket.socket) -> None:
    notifier.ready()
    assert _recv(systemd) == "READY=1"
    notifier.ready("model loaded, 3 agents")
    assert _recv(systemd) == "READY=1\nSTATUS=model loaded, 3 agents"


def test_a_receiver_that_does_not_read_never_stalls_status_or_watchdog(
    notifier: Notifier, systemd: socket.socket
) -> None:
    """STATUS and WATCHDOG are sent from the daemon's serving loop: with the receiver's queue full
    they are dropped at once (not waited for, SEND_TIMEOUT_S each); state changes still wait."""
    queued = 0
    while notifier.notify(STATUS=f"filler {queued}"):  # until the queue is full (net.unix.max_dgram_qlen)
        queued += 1
        assert queued < 10_000
    t0 = time.monotonic()
    for _ in range(5):
        notifier.status("still serving")
        notifier.watchdog()
    assert time.monotonic() - t0 < SEND_TIMEOUT_S / 2, "dropped, not waited for"
    assert len(_drain(systemd)) == queued  # only the fillers: the rest were dropped
    notifier.status("read again")
    assert _recv(systemd) == "STATUS=read again"


def test_status(notifier: Notifier, systemd: socket.socket) -> None:
    notifier.status("compacting agent-7")
    assert _recv(systemd) == "STATUS=compacting agent-7"


def test_status_newlines_cannot_inject_fields(notifier: Notifier, systemd: socket.socket) -> None:
    notifier.status("line one\nREADY=1")
    assert _recv(systemd) == "STATUS=line one READY=1"


def test_status_is_clipped(notifier: Notifier, systemd: socket.socket) -> None:
    notifier.status("x" * 10_000)
    got = _recv(systemd)
    assert got.startswith("STATUS=xxx")
    assert len(got.encode()) <= MAX_DATAGRAM


def test_reloading(notifier: Notifier, systemd: socket.socket) -> None:
    before = time.monotonic_ns() // 1000
    notifier.reloading()
    after = time.monotonic_ns() // 1000
    lines = _recv(systemd).split("\n")
    assert lines[0] == "RELOADING=1"
    key, _, value = lines[1].partition("=")
    assert key == "MONOTONIC_USEC"
    assert value.isdecimal()
    assert before <= int(value) <= after
    assert len(lines) == 2


def test_stopping_watchdog_extend_timeout(notifier: Notifier, systemd: socket.socket) -> None:
    notifier.stopping()
    assert _recv(systemd) == "STOPPING=1"
    notifier.watchdog()
    assert _recv(systemd) == "WATCHDOG=1"
    notifier.extend_timeout(90)
    assert _recv(systemd) == "EXTEND_TIMEOUT_USEC=90000000"
    notifier.extend_timeout(1.5)
    assert _recv(systemd) == "EXTEND_TIMEOUT_USEC=1500000"
    notifier.extend_timeout(-3)
    assert _recv(systemd) == "EXTEND_TIMEOUT_USEC=0"


def test_extend_timeout_rejects_non_finite(notifier: Notifier) -> None:
    with pytest.raises(ValueError, match="finite"):
        notifier.extend_timeout(float("inf"))


def test_notify_fields_in_order(notifier: Notifier, systemd: socket.socket) -> None:
    assert notifier.notify(STATUS="up", MAINPID=1234, READY=True) is True
    assert _recv(systemd) == "STATUS=up\nMAINPID=1234\nREADY=1"


@pytest.mark.parametrize("fields", [{}, {"ready": 1}, {"X-Y": 1}, {"STATUS": "x" * (MAX_DATAGRAM + 1)}])
def test_notify_refuses_bad_messages(
    notifier: Notifier, systemd: socket.socket, fields: dict[str, str | int]
) -> None:
    assert notifier.notify(**fields) is False
    assert _drain(systemd) == []


def test_close_then_send_again(notifier: Notifier, systemd: socket.socket) -> None:
    notifier.watchdog()
    notifier.close()
    notifier.close()  # idempotent
    notifier.watchdog()
    assert [_recv(systemd), _recv(systemd)] == ["WATCHDOG=1", "WATCHDOG=1"]


def test_abstract_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"compactd-test-{os.getpid()}-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        n = Notifier.from_env()
        try:
            assert n.enabled
            n.ready("abstract")
            assert _recv(sock) == "READY=1\nSTATUS=abstract"
            n.reloading()
            assert _recv(sock).startswith("RELOADING=1\nMONOTONIC_USEC=")
        finally:
            n.close()


def test_no_socket_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    n = Notifier.from_env()
    assert n.enabled is False
    assert n.notify(READY=1) is False
    n.ready("x")
    n.status("x")
    n.reloading()
    n.stopping()
    n.watchdog()
    n.extend_timeout(5)
    n.close()
    assert n._sock is None  # nothing was even opened


@pytest.mark.parametrize("address", ["", "relative/notify.sock", "@", "vsock:2:1234"])
def test_unsupported_address_is_disabled(monkeypatch: pytest.MonkeyPatch, address: str) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", address)
    n = Notifier.from_env()
    assert n.enabled is False
    assert n.notify(READY=1) is False


def test_missing_socket_returns_false(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens.sock"))
    n = Notifier.from_env()
    try:
        assert n.enabled
        assert n.notify(READY=1) is False
        # The convenience methods swallow the failure too.
        n.ready("x")
        n.reloading()
        n.watchdog()
    finally:
        n.close()


def test_nul_in_path_returns_false() -> None:
    # (cannot come from the environment, but the constructor takes any string)
    assert Notifier("/tmp/a\0b").notify(READY=1) is False


# --- watchdog -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usec", "pid", "expected"),
    [
        ("30000000", None, 15.0),
        ("30000000", "self", 15.0),
        ("1000000", "self", 0.5),
        ("30000000", "other", None),
        ("30000000", "garbage", None),
        ("30000000", "", None),
        (None, None, None),
        ("", None, None),
        ("0", None, None),
        ("-5", None, None),
        ("1.5", None, None),
        ("abc", None, None),
        (" 30", None, None),
        ("٣٠", None, None),  # Arabic-Indic digits: isdecimal() but not what systemd writes
    ],
)
def test_watchdog_interval(
    monkeypatch: pytest.MonkeyPatch, usec: str | None, pid: str | None, expected: float | None
) -> None:
    for name, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            real = {"self": str(os.getpid()), "other": str(os.getpid() + 1)}.get(value, value)
            monkeypatch.setenv(name, real)
    assert watchdog_interval() == expected


async def test_watchdog_loop_pings_until_cancelled(notifier: Notifier, systemd: socket.socket) -> None:
    task = asyncio.create_task(watchdog_loop(notifier, 0.02))
    got: list[str] = []
    await wait_until(lambda: got.extend(_drain(systemd)) or len(got) >= 3, 5, "three pings")
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pings = got + _drain(systemd)
    assert len(pings) >= 3
    assert set(pings) == {"WATCHDOG=1"}
    await asyncio.sleep(0.08)
    assert _drain(systemd) == []  # stopped


async def test_watchdog_loop_stops_when_the_event_loop_is_blocked(
    notifier: Notifier, systemd: socket.socket
) -> None:
    task = asyncio.create_task(watchdog_loop(notifier, 0.02))
    await wait_until(lambda: _drain(systemd), 5, "the loop pings")
    time.sleep(0.2)  # a hung event loop  # noqa: ASYNC251
    assert _drain(systemd) == []
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_watchdog_loop_disabled_notifier_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    task = asyncio.create_task(watchdog_loop(Notifier.from_env(), 0.01))
    await asyncio.sleep(0.05)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("interval", [0.0, -1.0, float("nan"), float("inf")])
async def test_watchdog_loop_rejects_bad_interval(notifier: Notifier, interval: float) -> None:
    with pytest.raises(ValueError, match="interval"):
        await watchdog_loop(notifier, interval)
