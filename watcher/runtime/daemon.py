"""The daemon's whole lifecycle in one async context: load, bind, ready, serve, stop in steps.

Signal handlers only set flags (uvicorn's rule); the shutdown trigger is injectable (hypercorn's
pattern), so tests and embedders can stop the daemon without signals.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from summarizer.digest import Summarizer
from summarizer.engine import LlamaEngine
from watcher.config.settings import Config, load_effective, parse_listen
from watcher.observe import logs
from watcher.observe.events import EventPublisher
from watcher.observe.metrics import Metrics, MetricsServer
from watcher.runtime.engine import StartupError, backend_for, load_engine, weights_status
from watcher.runtime.reload import Reloader, retire_engine
from watcher.runtime.sdnotify import Notifier, watchdog_interval, watchdog_loop
from watcher.serve import transport
from watcher.serve.auth import PeerInfo
from watcher.serve.modelcost import warm_up
from watcher.serve.recovery import open_store
from watcher.serve.server import Server
from watcher.store.store import Store, StoreError

log = logs.get("compactd.daemon")

FAREWELL_LINGER_MS = 500  # how long the closed socket may still send queued farewells (BYE)


@dataclass(frozen=True)
class Options:
    endpoint: str
    state_dir: Path


class Daemon:
    def __init__(
        self,
        cfg: Config,
        opts: Options,
        shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
        load_config: Callable[[], Config] | None = None,
    ) -> None:
        self.cfg = cfg
        self.opts = opts
        self.shutdown_trigger = shutdown_trigger
        self.stop = asyncio.Event()
        self.engine: LlamaEngine | None = None
        self.ctx: zmq.asyncio.Context | None = None
        self.sock: zmq.asyncio.Socket | None = None
        self.listener: transport.Listener | None = None
        self.server: Server | None = None
        self.store: Store | None = None  # watcher.store.store, in opts.state_dir
        self.notifier = Notifier.from_env()
        # SIGHUP reloads with `load_config` (the CLI passes the same lookup + its flag overrides)
        self.reloader = Reloader(self, load_config or (lambda: load_effective(cfg.source or None)))
        self.metrics: Metrics | None = None
        self.metrics_server: MetricsServer | None = None
        self.events: EventPublisher | None = None
        self._background: set[asyncio.Task[Any]] = set()

    # --- steps ---------------------------------------------------------------------------------------
    def _bind(self) -> zmq.asyncio.Socket:
        """Socket setup lives in watcher.serve.transport (modes, CURVE, one daemon per endpoint)."""
        self.opts.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.ctx = zmq.asyncio.Context()
        try:
            self.listener = transport.listen(self.ctx, self.opts.endpoint, self.cfg.daemon)
        except transport.TransportError as exc:
            raise StartupError(str(exc)) from exc
        return self.listener.sock

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
            await asyncio.sleep(min(5.0, self.cfg.daemon.agent_timeout_s / 4))  # a pacing timer
            self.server.expire(self.cfg.daemon.agent_timeout_s)
            self.server.store_housekeeping()
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
        # SIGHUP from now on (its default action would kill us while the model loads); the reload
        # task handles it once the daemon is up
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.reloader.request)
        try:  # fail fast (before the model load): tcp:// without CURVE, unusable keys
            transport.preflight(self.opts.endpoint, self.cfg.daemon)
        except transport.TransportError as exc:
            raise StartupError(str(exc)) from exc
        model_error = ""
        try:
            self.engine = await asyncio.to_thread(load_engine, self.cfg)
        except StartupError as exc:  # missing or corrupt model: serve with deterministic digests,
            if self.cfg.model.required:  # degraded, until a SIGHUP loads a good one -- unless required
                raise
            model_error = f"model unavailable: {exc}"
            log.error("model_unavailable", error=str(exc))
        try:
            try:  # the archive: integrity check, migrations, boot recovery (watcher.serve.recovery)
                self.store = open_store(self.opts.state_dir, self.cfg.store)
            except StoreError as exc:
                raise StartupError(str(exc)) from exc
            self.sock = self._bind()
            summarizer = Summarizer(
                backend_for(self.cfg, self.engine),
                degraded_reason=model_error,
                score_max_tokens=self.cfg.model.score_max_tokens,
                gists=self.cfg.model.gists,
            )
            peer_info = PeerInfo(transport=transport.scheme(self.opts.endpoint))
            self.server = Server(self.sock, self.cfg, summarizer, store=self.store, peer_info=peer_info)
            self.server.add_status("store", self.store.stats)
            self.server.add_status("weights", lambda: weights_status(self.engine))
            if self.engine is not None:  # the first measured prefill rate (watcher.serve.modelcost)
                self._spawn(warm_up(summarizer, self.server.jobs.cost), "model-warm")
            await self._start_observers(self.server)
            self._install_signals()
            log.info(
                "ready",
                endpoint=self.opts.endpoint,
                state_dir=str(self.opts.state_dir),
                model=self.engine.settings.path if self.engine else None,
                weights=weights_status(self.engine),
                n_threads=self.engine.n_threads if self.engine else 0,
                pid=os.getpid(),
            )
            self.notifier.ready(self.status_line())
            async with asyncio.TaskGroup() as tg:
                background = [
                    tg.create_task(self._watch_trigger(), name="shutdown-trigger"),
                    tg.create_task(self._housekeeping(), name="housekeeping"),
                    tg.create_task(self.reloader.run(), name="reload"),
                ]
                if (interval := watchdog_interval()) is not None:
                    background.append(tg.create_task(watchdog_loop(self.notifier, interval), name="watchdog"))
                await self.server.run(self.stop)
                for task in background:
                    task.cancel()
        finally:
            await self._shutdown()

    async def _shutdown(self) -> None:
        log.info("stopping", **(self.server.totals() if self.server is not None else {}))
        self.notifier.stopping()
        linger_ms = 0
        if self.server is not None:
            await self.server.drain()  # step 1: stop compaction jobs
            if self.server.agents:  # BYE {reason: shutdown}: sent while the socket lingers (step 2)
                self.server.farewell("shutdown")
                linger_ms = FAREWELL_LINGER_MS
        if self.events is not None:  # retained "offline", clean MQTT disconnect (bounded wait)
            await self.events.stop()
        if self.metrics_server is not None:
            await self.metrics_server.close()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.listener is not None:  # step 2: close the socket, remove its file, release the lock
            self.listener.close(linger_ms)
        if self.ctx is not None:  # returns once the farewells are sent, or after the linger at most
            await asyncio.to_thread(self.ctx.term)
        if self.engine is not None:  # step 3: close the model
            await asyncio.to_thread(self.engine.close)
        if self.store is not None:  # step 4: close the archive (everything in it is committed)
            self.store.close()
        self.notifier.close()
        log.info("stopped")

    # --- metrics, events, reload --------------------------------------------------------------------
    async def _start_observers(self, server: Server) -> None:
        """Metrics and MQTT listen to the server's events; the exporter binds before READY=1."""
        server.add_listener(self._on_event)
        server.add_status("mqtt", lambda: self.events.status() if self.events else None)
        server.add_status("metrics", lambda: self.metrics_server.address if self.metrics_server else None)
        server.add_status("config", lambda: self.cfg.source or None)
        server.add_status(
            "reloads",
            lambda: {
                "ok": self.reloader.reloads,
                "failed": self.reloader.failures,
            },
        )
        self.metrics = Metrics(server)
        self.metrics.loop_lag = server.loop_lag.quantiles
        if self.store is not None:
            db = self.store.database  # (a scrape counts the index's lag afresh; STATUS reads it cached)
            self.metrics.store = lambda: {**db.background(), "index_pending_rows": db.pending_rows()}
        if self.cfg.metrics.listen:
            host, port = parse_listen(self.cfg.metrics.listen)
            self.metrics_server = MetricsServer(self.metrics)
            try:
                await self.metrics_server.start(host, port)
            except OSError as exc:
                self.metrics_server = None
                raise StartupError(
                    f"metrics.listen {self.cfg.metrics.listen}: {exc.strerror or exc}"
                ) from exc
        self._set_events(self.cfg)

    def _on_event(self, kind: str, agent: str | None, fields: dict[str, Any]) -> None:
        if self.metrics is not None:
            self.metrics.on_event(kind, agent, fields)
        if self.events is not None:
            self.events.on_event(kind, agent, fields)

    def _set_events(self, cfg: Config) -> None:
        """A publisher for ``cfg.mqtt`` (none if off). On a reload the old one first says "offline"
        and disconnects, then the new one connects (same client id: they must not overlap)."""
        old = self.events
        self.events = EventPublisher(cfg.mqtt) if cfg.mqtt.url else None
        if self.metrics is not None:
            self.metrics.events = self.events
        if old is None:
            if self.events is not None:
                self.events.start()
        else:
            self._spawn(self._swap_publishers(old, self.events), "mqtt-swap")

    async def _swap_publishers(self, old: EventPublisher, new: EventPublisher | None) -> None:
        await old.stop()
        if new is not None and new is self.events and not self.stop.is_set():
            new.start()

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("background_task_failed", task=task.get_name(), error=f"{type(exc).__name__}: {exc}")

    def apply_config(self, new: Config, engine: LlamaEngine | None) -> None:
        """Swap in a validated configuration (watcher.runtime.reload); synchronous, so it is atomic.
        The server takes it through its one door (Server.apply_config)."""
        old, self.cfg = self.cfg, new
        assert self.server is not None
        if (old.daemon.log_level, old.daemon.log_format) != (new.daemon.log_level, new.daemon.log_format):
            logs.configure(new.daemon.log_level, new.daemon.log_format)
        retired, summarizer = None, None
        if engine is not self.engine:
            retired, self.engine = self.engine, engine
            summarizer = Summarizer(
                backend_for(new, engine), score_max_tokens=new.model.score_max_tokens, gists=new.model.gists
            )
        self.server.apply_config(new, summarizer)
        if summarizer is not None:
            if engine is not None:
                self._spawn(warm_up(summarizer, self.server.jobs.cost), "model-warm")
            if retired is not None:
                self._spawn(retire_engine(retired, set(self.server.tasks)), "engine-retire")
        if old.mqtt != new.mqtt:
            self._set_events(new)
