"""Real upstreams for the proxy, as subprocesses on free loopback ports, on the shipped SmolLM2 GGUF:
llama.cpp's own ``llama-server`` (OpenAI chat completions and the Anthropic Messages API) and
llama-cpp-python's server (OpenAI chat completions).

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

from watcher.runtime.paths import default_model_path


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


def stop_process(proc: subprocess.Popen[bytes], grace_s: float) -> int:
    """SIGTERM, then SIGKILL after ``grace_s``; the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class ModelServer:
    """A model server subprocess on a free loopback port, ready once ``health`` answers 200."""

    health = "/health"

    def __init__(self, workdir: Path, cmd: list[str], port: int, log_name: str) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = workdir / log_name
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + self.health, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def wait(self, limit_s: float = 120.0) -> None:
        """Block until the server answers (or raise UpstreamError)."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise UpstreamError(
                    f"{self.log_path.stem} exited with {self.proc.returncode}: {self.log_tail()}"
                )
            if self._healthy():
                return
            time.sleep(0.2)
        raise UpstreamError(f"{self.log_path.stem} not ready after {limit_s:g} s: {self.log_tail()}")

    async def wait_ready(self, limit_s: float = 120.0) -> None:
        await asyncio.to_thread(self.wait, limit_s)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        stop_process(self.proc, 20)
        self._log.close()


class LlamaServer(ModelServer):
    """llama.cpp's ``llama-server`` (OpenAI chat completions and the Anthropic Messages API) on the
    SmolLM2 GGUF; ``ctx`` beyond the model's 8192 trained tokens is allowed (a proxy test needs
    the room, not the quality), prompt caching on (its default)."""

    def __init__(self, workdir: Path, ctx: int = 32768, threads: int = 2, model: str = "") -> None:
        binary = llama_server_binary()
        if not binary:
            raise UpstreamError("llama-server not found: run ./dev.sh setup (or set COMPACTD_LLAMA_SERVER)")
        port = free_port()
        cmd = [
            binary,
            "--model", model or default_model_path(),
            "--host", "127.0.0.1",
            "--port", str(port),
            "--ctx-size", str(ctx),
            "--parallel", "1",
            "--threads", str(threads),
            "--alias", "smollm2",
            "--no-webui",
            # llama-server caps a slot at the trained context (8192 for SmolLM2); the proxy
            # tests need the room, not the quality
            "--override-kv", f"llama.context_length=int:{max(ctx, 8192)}",
        ]  # fmt: skip
        super().__init__(workdir, cmd, port, "llama-server.log")


class LlamaCppPythonServer(ModelServer):
    """llama-cpp-python's own OpenAI-compatible server (``python -m llama_cpp.server``, the
    ``[server]`` extra) on the SmolLM2 GGUF: the same engine the daemon embeds."""

    health = "/v1/models"

    def __init__(self, workdir: Path, ctx: int = 32768, threads: int = 2, model: str = "") -> None:
        port = free_port()
        cmd = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", model or default_model_path(),
            "--model_alias", "smollm2",
            "--host", "127.0.0.1",
            "--port", str(port),
            "--n_ctx", str(ctx),
            "--n_threads", str(threads),
            "--verbose", "False",
        ]  # fmt: skip
        super().__init__(workdir, cmd, port, "llama-cpp-python-server.log")
