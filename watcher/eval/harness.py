"""The daemon under test: a real `compactd run` subprocess for replay, the benchmarks and the tests.

:class:`DaemonProcess` starts one on a private socket and state directory; :func:`running_daemon`
waits until it is ready and stops it on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

__all__ = ["DaemonProcess", "ReplayError", "running_daemon"]


class ReplayError(RuntimeError):
    """A replay or benchmark cannot go on (the daemon under test failed, bad input); says why."""


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
        cmd = [
            sys.executable,
            "-m",
            "watcher",
            "run",
            "--socket",
            self.endpoint,
            "--state-dir",
            str(workdir / "state"),
        ]
        if config:
            cmd += ["--config", config]
        if not model:
            cmd.append("--no-model")
        cmd += extra_args
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **env} if env else None
        )

    async def wait_ready(self, limit_s: float = 120.0) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ReplayError(f"daemon exited with {self.proc.returncode}: {self.log_tail()}")
            if b'"event": "ready"' in self.log_path.read_bytes():
                return
            await asyncio.sleep(0.1)
        raise ReplayError(f"daemon not ready after {limit_s:g} s: {self.log_tail()}")

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
        self._log.close()
        return self.proc.returncode

    def kill(self) -> int:
        """SIGKILL (kill -9): no shutdown code runs, as in a crash."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._log.close()
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
