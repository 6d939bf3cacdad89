"""The daemon under test: a real `compactd run` subprocess for replay, the benchmarks and the tests.

:class:`DaemonProcess` starts one on a private socket and state directory and hands it a private
``$NOTIFY_SOCKET`` (:class:`NotifySocket`, the receiving end systemd would have): readiness is the
daemon's own ``READY=1`` (watcher.runtime.sdnotify), not a line in its log. :func:`running_daemon`
waits until it is ready and stops it on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

__all__ = ["DaemonProcess", "NotifySocket", "ReplayError", "running_daemon"]


class ReplayError(RuntimeError):
    """A replay or benchmark cannot go on (the daemon under test failed, bad input); says why."""


class NotifySocket:
    """The receiving end of ``$NOTIFY_SOCKET``: every sd_notify datagram, parsed, with its arrival time.

    ``path`` None binds an address in the abstract namespace (``@name``: no file, no length limit
    from a deep working directory).
    """

    def __init__(self, path: str | None = None) -> None:
        self.address = path or f"@compactd-harness-{os.getpid()}-{secrets.token_hex(8)}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.address[1:] if self.address.startswith("@") else self.address)
        self.got: list[tuple[float, dict[str, str]]] = []

    def recv(self, within: float) -> dict[str, str] | None:
        """The next notification, or None if none arrives within ``within`` seconds."""
        self.sock.settimeout(max(0.01, within))
        try:
            data = self.sock.recv(4096)
        except TimeoutError:
            return None
        msg = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
        self.got.append((time.monotonic(), msg))
        return msg

    def wait(
        self,
        key: str,
        value: str | None = None,
        within: float = 30.0,
        alive: Callable[[], None] | None = None,
    ) -> dict[str, str]:
        """The first notification with ``key`` (equal to ``value`` if given) within ``within`` seconds.

        ``alive`` is called between datagrams (at least every 0.25 s) and may raise to give up
        early, e.g. when the sender has exited.
        """
        deadline = time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0:
            if alive is not None:
                alive()
            msg = self.recv(min(left, 0.25))
            if msg is not None and key in msg and (value is None or msg[key] == value):
                return msg
        raise ReplayError(f"no {key}={value or '*'} within {within:g} s; got {[m for _, m in self.got]}")

    def collect(self, seconds: float) -> list[dict[str, str]]:
        """Every notification arriving in the next ``seconds`` seconds."""
        out = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if (msg := self.recv(left)) is not None:
                out.append(msg)
        return out

    def close(self) -> None:
        self.sock.close()


def watcher_argv(*args: str) -> list[str]:
    """``python -m watcher ARGS`` with this interpreter, without the working directory on the module
    path (``-P``): the tree imported is the one ``$PYTHONPATH`` names, else the installed one, never
    a checkout that happens to be the working directory (a side-by-side benchmark of two trees runs
    each tree's daemon, wherever it is started from)."""
    return [sys.executable, "-P", "-m", "watcher", *args]


def daemon_argv(
    endpoint: str, state_dir: Path, *, model: bool = False, config: str | None = None
) -> list[str]:
    """The command line of a `compactd run` on ``endpoint`` keeping its state in ``state_dir``
    (this interpreter, so a test runs the daemon of the tree under test: :func:`watcher_argv`)."""
    cmd = watcher_argv("run", "--socket", endpoint, "--state-dir", str(state_dir))
    if config:
        cmd += ["--config", config]
    if not model:
        cmd.append("--no-model")
    return cmd


class DaemonProcess:
    """A real `compactd run` subprocess on a private socket, stopped with SIGTERM."""

    def __init__(
        self,
        workdir: Path,
        config: str | None,
        model: bool,
        extra_args: tuple[str, ...] = (),
        endpoint: str | None = None,
        log_name: str = "daemon.log",
        env: dict[str, str] | None = None,
    ) -> None:
        self.endpoint = endpoint or f"ipc://{workdir / 'agents.sock'}"
        self.log_path = workdir / log_name
        cmd = daemon_argv(self.endpoint, workdir / "state", model=model, config=config) + list(extra_args)
        full_env = {**os.environ, **(env or {})}
        # A caller that set $NOTIFY_SOCKET itself (a test of sd_notify) listens there; otherwise ours.
        self.notify = None if "NOTIFY_SOCKET" in full_env else NotifySocket()
        if self.notify is not None:
            full_env["NOTIFY_SOCKET"] = self.notify.address
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=full_env)

    def _alive(self) -> None:
        if self.proc.poll() is not None:
            raise ReplayError(f"daemon exited with {self.proc.returncode}")

    async def wait_ready(self, limit_s: float = 120.0) -> None:
        """Until the daemon sends ``READY=1`` (start-up or a reload done); ReplayError if it exits
        first or ``limit_s`` passes."""
        await self.wait_notify("READY", "1", limit_s)

    async def wait_notify(self, key: str, value: str | None = None, limit_s: float = 30.0) -> dict[str, str]:
        """The daemon's next sd_notify message with ``key`` (= ``value``); see :meth:`NotifySocket.wait`."""
        if self.notify is None:
            raise ReplayError("$NOTIFY_SOCKET was set by the caller: wait on that socket instead")
        try:
            return await asyncio.to_thread(self.notify.wait, key, value, limit_s, self._alive)
        except ReplayError as exc:
            raise ReplayError(f"{exc}; log: {self.log_tail()}") from None

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close()
        return self.proc.returncode

    def _close(self) -> None:
        self._log.close()
        if self.notify is not None:
            self.notify.close()

    def kill(self) -> int:
        """SIGKILL (kill -9): no shutdown code runs, as in a crash."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close()
        return self.proc.returncode


@contextlib.asynccontextmanager
async def running_daemon(workdir: Path, config: str | None, model: bool) -> AsyncIterator[DaemonProcess]:
    """A :class:`DaemonProcess` in ``workdir``, ready, and stopped on the way out."""
    daemon = DaemonProcess(workdir, config, model)
    try:
        await daemon.wait_ready()
        yield daemon
    finally:
        daemon.stop()
