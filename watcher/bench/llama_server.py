"""A real upstream for the proxy: llama.cpp's own ``llama-server`` (OpenAI chat completions and the
Anthropic Messages API) on the shipped SmolLM2 GGUF, as a subprocess on a free loopback port.

``./dev.sh setup`` builds the binary from the llama.cpp sources vendored in the llama-cpp-python
sdist pinned by pyproject (same version as the daemon's engine) and links it as
``.venv/bin/llama-server``; ``$COMPACTD_LLAMA_SERVER`` overrides where it is looked for."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from watcher.paths import default_model_path


class UpstreamError(RuntimeError):
    pass


def llama_server_binary() -> str:
    for candidate in (
        os.environ.get("COMPACTD_LLAMA_SERVER", ""),
        str(Path(sys.executable).parent / "llama-server"),
        shutil.which("llama-server") or "",
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LlamaServer:
    """``llama-server`` on the SmolLM2 GGUF; ``ctx`` beyond the model's 8192 trained tokens is
    allowed (a proxy test needs the room, not the quality), prompt caching on (its default)."""

    def __init__(self, workdir: Path, ctx: int = 32768, threads: int = 2, model: str = "") -> None:
        binary = llama_server_binary()
        if not binary:
            raise UpstreamError("llama-server not found: run ./dev.sh setup (or set COMPACTD_LLAMA_SERVER)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "llama-server.log"
        cmd = [
            binary,
            "--model", model or default_model_path(),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--ctx-size", str(ctx),
            "--parallel", "1",
            "--threads", str(threads),
            "--alias", "smollm2",
            "--no-webui",
        ]  # fmt: skip
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:  # noqa: S310 (loopback)
                return bool(r.status == 200)
        except OSError:
            return False

    async def wait_ready(self, limit_s: float = 120.0) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise UpstreamError(f"llama-server exited with {self.proc.returncode}: {self.log_tail()}")
            if await asyncio.to_thread(self._healthy):
                return
            await asyncio.sleep(0.2)
        raise UpstreamError(f"llama-server not ready after {limit_s:g} s: {self.log_tail()}")

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
