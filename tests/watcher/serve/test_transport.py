"""Transport security with real daemon subprocesses and real sockets: tcp:// only with CURVE and an
allow-list, the ipc socket's modes, one daemon per endpoint, stale socket files cleaned up."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest
import zmq
import zmq.asyncio
import zmq.auth

from ipc.client import AgentLink, LinkError
from ipc.protocol import decode, encode
from ipc.sections import Section
from tests.fixtures.daemon import wait_until
from tests.fixtures.net import free_port
from watcher.config.settings import ConfigError, DaemonConfig, load
from watcher.eval.harness import DaemonProcess
from watcher.serve.transport import TransportError, _make_dir, preflight, write_keypair


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "watcher", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@asynccontextmanager
async def daemon(
    workdir: Path, endpoint: str | None = None, config: str | None = None, log_name: str = "daemon.log"
) -> AsyncIterator[DaemonProcess]:
    proc = DaemonProcess(workdir, config, model=False, endpoint=endpoint, log_name=log_name)
    try:
        await proc.wait_ready(30)
        yield proc
    finally:
        proc.stop()


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


async def ask_status(endpoint: str, **curve: bytes) -> dict[str, object] | None:
    """One STATUS from a fresh DEALER; None if nothing at all came back within 1.5 s."""
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    for k, v in curve.items():
        setattr(sock, k, v)
    try:
        sock.connect(endpoint)
        await sock.send(encode({"t": "STATUS", "id": 1}))
        if await sock.poll(1500, zmq.POLLIN):
            return decode(await sock.recv())
        return None
    finally:
        sock.close(0)
        ctx.term()


# --- tcp:// and CURVE -------------------------------------------------------------------------------


def test_tcp_without_curve_refuses_to_start(tmp_path: Path) -> None:
    r = run_cli(
        "run", "--no-model", "--socket", f"tcp://127.0.0.1:{free_port()}", "--state-dir", str(tmp_path)
    )
    assert r.returncode == 1
    assert "CURVE" in r.stderr and "tcp://" in r.stderr and "curve_secret_key_file" in r.stderr


def test_curve_keys_must_come_together(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[daemon]\ncurve_secret_key_file = "/k/server.key_secret"\n')
    with pytest.raises(ConfigError, match="set together"):
        load(cfg)


def test_preflight_rejects_bad_keys_and_schemes(tmp_path: Path) -> None:
    pub, sec = write_keypair(tmp_path / "keys", "server")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    ok = load_daemon_cfg(tmp_path, sec, allowed)
    keys = preflight("tcp://127.0.0.1:1", ok)
    assert keys is not None and keys.public == zmq.auth.load_certificate(pub)[0]
    pub.chmod(0o600)
    with pytest.raises(TransportError, match="holds no secret key"):
        preflight("tcp://127.0.0.1:1", load_daemon_cfg(tmp_path, pub, allowed))
    sec.chmod(0o644)
    with pytest.raises(TransportError, match="chmod 600"):
        preflight("tcp://127.0.0.1:1", ok)
    with pytest.raises(TransportError, match="unsupported endpoint"):
        preflight("inproc://x", ok)


def load_daemon_cfg(tmp_path: Path, secret: Path, allowed: Path) -> DaemonConfig:
    cfg = tmp_path / "curve.toml"
    cfg.write_text(f'[daemon]\ncurve_secret_key_file = "{secret}"\ncurve_allowed_keys_dir = "{allowed}"\n')
    return load(cfg).daemon


def test_keygen_cli(tmp_path: Path) -> None:
    r = run_cli("keygen", str(tmp_path / "k"), "--name", "agent-1")
    assert r.returncode == 0, r.stderr
    secret = tmp_path / "k" / "agent-1.key_secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o700
    public, sec = zmq.auth.load_certificate(secret)
    assert sec and public.decode() in r.stdout
    again = run_cli("keygen", str(tmp_path / "k"), "--name", "agent-1")
    assert again.returncode == 1 and "already exists" in again.stderr


async def test_tcp_with_curve_admits_only_allowed_keys(tmp_path: Path) -> None:
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    _, server_secret = write_keypair(keys, "server")
    good_pub, good_secret = write_keypair(keys, "good")
    _, bad_secret = write_keypair(keys, "stranger")
    allowed.mkdir()
    (allowed / "good.key").write_bytes(good_pub.read_bytes())
    config = tmp_path / "compactd.toml"
    config.write_text(
        f'[daemon]\ncurve_secret_key_file = "{server_secret}"\ncurve_allowed_keys_dir = "{allowed}"\n'
    )
    server_pub = zmq.auth.load_certificate(server_secret)[0]
    g_pub, g_sec = zmq.auth.load_certificate(good_secret)
    b_pub, b_sec = zmq.auth.load_certificate(bad_secret)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    async with daemon(tmp_path, endpoint, str(config)) as d:
        # an allowed key: a full session
        link = AgentLink(
            endpoint,
            agent="curve-ok",
            budget=4000,
            timeout_s=5,
            curve_serverkey=server_pub,
            curve_publickey=g_pub,
            curve_secretkey=g_sec,
        )
        async with link:
            await link.append(Section("s1", "user", "hello over CURVE"), wait=True)
            assert (await link.status())["agents"][0]["tokens"] > 0
        # a key not in the allow-list, and a client without CURVE: nothing comes back at all
        assert (
            await ask_status(
                endpoint, curve_serverkey=server_pub, curve_publickey=b_pub, curve_secretkey=b_sec
            )
            is None
        )
        assert await ask_status(endpoint) is None
        stranger = AgentLink(
            endpoint,
            agent="curve-bad",
            budget=4000,
            timeout_s=1.5,
            curve_serverkey=server_pub,
            curve_publickey=b_pub,
            curve_secretkey=b_sec,
        )
        with pytest.raises(LinkError, match="timeout"):
            await stranger.connect()
        await stranger.close()
        # the daemon is still up and serving the allowed key; a second daemon cannot take the port
        reply = await ask_status(
            endpoint, curve_serverkey=server_pub, curve_publickey=g_pub, curve_secretkey=g_sec
        )
        assert reply is not None and reply["t"] == "STATE"
        second = run_cli(
            "run",
            "--no-model",
            "--config",
            str(config),
            "--socket",
            endpoint,
            "--state-dir",
            str(tmp_path / "s2"),
        )
        assert second.returncode == 1 and "Address already in use" in second.stderr
        assert d.proc.poll() is None
        assert b"curve_client_denied" in d.log_path.read_bytes()
        # allowing the stranger's key takes a SIGHUP, not a restart
        (allowed / "stranger.key").write_bytes((keys / "stranger.key").read_bytes())
        d.proc.send_signal(signal.SIGHUP)
        await wait_until(lambda: b"curve_keys_reloaded" in d.log_path.read_bytes(), 5, "keys reloaded")
        reply = await ask_status(
            endpoint, curve_serverkey=server_pub, curve_publickey=b_pub, curve_secretkey=b_sec
        )
        assert reply is not None and reply["t"] == "STATE"


# --- ipc:// modes and ownership ---------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o077, 0o000])
async def test_ipc_socket_0660_in_a_0750_directory(tmp_path: Path, mask: int) -> None:
    sock = tmp_path / "run" / "compactd" / "agents.sock"
    with umask(mask):  # the daemon inherits it; the modes must not depend on it
        proc = DaemonProcess(tmp_path, None, model=False, endpoint=f"ipc://{sock}")
    try:
        await proc.wait_ready(30)
        assert stat.S_ISSOCK(sock.stat().st_mode)
        assert stat.S_IMODE(sock.stat().st_mode) == 0o660
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o750
    finally:
        proc.stop()
    assert not sock.exists(), "the socket file is removed on a clean stop"


def test_existing_directory_is_left_alone(tmp_path: Path) -> None:
    d = tmp_path / "rundir"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    _make_dir(d)
    assert stat.S_IMODE(d.stat().st_mode) == 0o755


async def test_second_daemon_on_a_live_socket_refuses(tmp_path: Path) -> None:
    async with daemon(tmp_path) as first:
        r = run_cli("run", "--no-model", "--socket", first.endpoint, "--state-dir", str(tmp_path / "s2"))
        assert r.returncode == 1
        assert "already serving" in r.stderr and str(first.proc.pid) in r.stderr
        reply = await ask_status(first.endpoint)
        assert reply is not None and reply["t"] == "STATE", "the first daemon kept its endpoint"


async def test_stale_socket_of_a_killed_daemon_is_replaced(tmp_path: Path) -> None:
    first = DaemonProcess(tmp_path, None, model=False)
    await first.wait_ready(30)
    first.proc.send_signal(signal.SIGKILL)
    first.stop()
    path = Path(first.endpoint.removeprefix("ipc://"))
    assert path.is_socket(), "kill -9 leaves the socket file behind"  # noqa: ASYNC240
    async with daemon(tmp_path, log_name="second.log") as second:
        reply = await ask_status(second.endpoint)
        assert reply is not None and reply["t"] == "STATE"
        assert b"stale_socket_removed" in second.log_path.read_bytes()


async def test_socket_held_by_another_process_is_not_stolen(tmp_path: Path) -> None:
    path = tmp_path / "agents.sock"
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(path))
    other.listen(1)
    try:
        r = run_cli("run", "--no-model", "--socket", f"ipc://{path}", "--state-dir", str(tmp_path / "s"))
        assert r.returncode == 1 and "already served by a live process" in r.stderr
        assert path.exists()
    finally:
        other.close()
    path.unlink()
    path.write_text("not a socket")
    r = run_cli("run", "--no-model", "--socket", f"ipc://{path}", "--state-dir", str(tmp_path / "s"))
    assert r.returncode == 1 and "is not a socket" in r.stderr
    assert path.read_text() == "not a socket"


async def test_concurrent_starts_leave_exactly_one_daemon(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path / 'agents.sock'}"
    dirs = [tmp_path / f"d{i}" for i in range(3)]  # each its own state dir: only the socket is shared
    for d in dirs:
        d.mkdir()
    procs = [DaemonProcess(d, None, model=False, endpoint=endpoint) for d in dirs]
    try:
        await wait_until(lambda: sum(p.proc.poll() is not None for p in procs) == 2, 10, "two daemons exit")
        alive = [p for p in procs if p.proc.poll() is None]
        assert len(alive) == 1
        await alive[0].wait_ready(30)
        reply = await ask_status(endpoint)
        assert reply is not None and reply["t"] == "STATE"
        for p in procs:
            if p is not alive[0]:
                assert p.proc.returncode == 1 and b"already serving" in p.log_path.read_bytes()
    finally:
        for p in procs:
            p.stop()
