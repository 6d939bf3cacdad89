"""The daemon's side of the wire: one ROUTER socket; each frame is received, routed to the agent's
session handler, and answered.

Everything a client sends is untrusted. Each frame is decoded and validated (ipc.protocol); any
problem becomes an ERROR reply to that peer only, and the loop goes on serving everyone else.
The handlers live by concern: attach (HELLO, BYE), sync (SNAPSHOT, DELTA), acks (ACK, NACK),
requests (RECALL, CHECKPOINT, RESTORE, STATUS), jobs (compaction), housekeeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog
import zmq
import zmq.asyncio

from ipc.protocol import E, ProtocolError, T, decode, encode, ref_of
from summarizer.digest import Summarizer
from watcher.config.settings import Config
from watcher.observe import logs
from watcher.planning.policies import Policy, policy_for
from watcher.serve import attach, limits, wire
from watcher.serve.acks import Acks
from watcher.serve.auth import PeerInfo
from watcher.serve.housekeeping import Housekeeping, Switch, gc_pacer
from watcher.serve.hub import Listener, Route
from watcher.serve.jobs import Jobs
from watcher.serve.looplag import LoopLag
from watcher.serve.packer import Packer
from watcher.serve.readahead import ReadAhead
from watcher.serve.readers import Readers
from watcher.serve.requests import Requests, status
from watcher.serve.scheduler import FairScheduler
from watcher.serve.session import Session
from watcher.serve.sync import Sync
from watcher.store.store import Store

log = logs.get("compactd.server")

DRAIN_BATCH = 256  # frames handled per wake-up of the serving loop before it yields
# The ingest hot path calls the Cython socket under zmq.Socket directly (zmq.Socket's send and
# recv_multipart are Python wrappers around it: as much again per call), with plain int flags
# (or-ing the enums costs more than sending a reply).
_zsend = zmq.backend.Socket.send
_zrecv = zmq.backend.Socket.recv
_zget = zmq.backend.Socket.get
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE_NOBLOCK = int(zmq.SNDMORE | zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)


class Server:
    def __init__(
        self,
        sock: zmq.asyncio.Socket,
        cfg: Config,
        summarizer: Summarizer,
        store: Store | None = None,
        *,
        peer_info: PeerInfo | None = None,
        policies: Callable[[str], Policy] = policy_for,
    ) -> None:
        """``peer_info``: what the transport proves about peers (watcher.serve.auth);
        ``policies``: a planner's name -> the policy a session gets at HELLO."""
        self.sock = sock
        self.store = store if store is not None else Store.memory()  # watcher.store.store: archive first
        self.peer_info = peer_info if peer_info is not None else PeerInfo()
        self.policies = policies
        self.cfg = cfg
        self.summarizer = summarizer
        self.max_frame = cfg.daemon.max_frame_bytes
        self.by_peer: dict[bytes, Session] = {}
        self.readers = Readers(self)  # connections reading an agent's archive only (MCP, hooks)
        self.agents: dict[str, Session] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.started = time.time()
        self.frames = 0
        self.send_failures = 0  # replies and events that could not be sent (peer gone, queue full)
        self.busy_s = 0.0  # time spent handling frames (decode → validate → mirror → plan → reply)
        self._drain: zmq.Socket[bytes] | None = None  # plain view of sock (run())
        self._in_loop = False  # handling frames inside run(): no receive is pending
        self._log_agent: str | None = None  # the agent bound in the logging context
        self.errors: dict[str, int] = {}
        self._listeners: list[Listener] = []  # add_listener
        self._status_extra: dict[str, Callable[[], Any]] = {}  # more "daemon" fields for STATUS
        self.meter = limits.Meter()  # bytes all mirrors hold (watcher.serve.limits)
        # long texts of the mirrors held deflated, packed in a thread ([daemon] pack_texts)
        self.packer = Packer(lambda: self.cfg.daemon.pack_texts)
        self.add_status("packing", self.packer.stats)
        # compaction jobs: one per agent at a time, earliest deadline first; a model lane only with a model
        self.scheduler = FairScheduler(self.tasks, has_model=lambda: self.summarizer.engine is not None)
        self.add_status("compaction_queue", self.scheduler.stats)
        self.loop_lag = LoopLag()  # how late the loop runs what is due (watcher.serve.looplag)
        self.add_status("loop_lag", self.loop_lag.stats)
        self.housekeeping = Housekeeping(self)
        self.jobs = Jobs(self)
        # the model ranks the lines of sections the next digests will likely fold, while it is idle
        self.read_ahead = ReadAhead(self)
        self.add_status("read_ahead", lambda: self.read_ahead.stats() if self.summarizer.engine else None)
        self.add_status("digest_methods", self.jobs.degrader.stats)
        self.add_status("model_cost", lambda: self.jobs.cost.stats() if self.summarizer.engine else None)
        self.sync = Sync(self, self.jobs)
        acks, requests = Acks(self, self.sync, self.jobs), Requests(self, self.jobs)
        # requests that need an attached agent -> their handler (session, msg, ref)
        self.routes: dict[str, Route] = {
            T.SNAPSHOT: self.sync.snapshot,
            T.DELTA: self.sync.delta,
            T.ACK: acks.ack,
            T.NACK: acks.nack,
            T.RECALL: requests.recall,
            T.BYE: lambda state, msg, ref: attach.bye(self, state, msg, ref),
            T.CHECKPOINT: requests.checkpoint,
            T.RESTORE: requests.restore,
        }

    # --- loop ----------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        # A synchronous view of the same socket drains frames that are already queued without a
        # future and a loop turn each (ingest hot path); the awaited recv wakes us when it was empty
        # and checks the socket's events itself, so no edge is missed.
        drain: zmq.Socket[bytes] = zmq.Socket.shadow(self.sock.underlying)
        self._drain = drain
        recv: Any = None  # the pending receive (a future), cancelled when stop is set

        def on_stop(_: object) -> None:
            if recv is not None and not recv.done():
                recv.cancel()

        stopper = asyncio.create_task(stop.wait(), name="server-stop")
        stopper.add_done_callback(on_stop)
        pacer = asyncio.create_task(gc_pacer(), name="gc-pacer")
        lag = asyncio.create_task(self.loop_lag.run(), name="loop-lag")
        packer = asyncio.create_task(self.packer.run(), name="packer")
        reader = asyncio.create_task(self.read_ahead.run(), name="read-ahead")
        Switch.enter()
        try:
            while not stop.is_set():
                # awaited directly (no asyncio.wait per wake-up): it is resolved at once when a
                # frame is already queued, and costs a loop turn only when the socket was empty
                recv = self.sock.recv_multipart(copy=True)
                try:
                    parts = await recv
                except asyncio.CancelledError:
                    if stop.is_set():
                        break
                    raise
                self._in_loop = True
                try:
                    if not self._fast_delta(parts):
                        await self._on_parts(parts)
                    for _ in range(DRAIN_BATCH):  # bounded: compaction tasks get their turn too
                        try:  # drain.recv_multipart(NOBLOCK), without its wrappers
                            peer = _zrecv(drain, _NOBLOCK)
                        except zmq.Again:
                            break
                        # a ROUTER message is the peer's routing id, then at least one part (all
                        # there already: a message is atomic); asking for more costs a µs a time
                        parts = [peer, _zrecv(drain, _NOBLOCK)]
                        while _zget(drain, _RCVMORE):
                            parts.append(_zrecv(drain, _NOBLOCK))
                        if not self._fast_delta(parts):
                            await self._on_parts(parts)
                finally:
                    self._in_loop = False
        finally:
            stopper.cancel()
            pacer.cancel()
            lag.cancel()
            packer.cancel()
            self.read_ahead.preempt()
            reader.cancel()
            self.packer.close()
            Switch.leave()
            if self._log_agent is not None:  # the last frame's agent must not label the shutdown logs
                structlog.contextvars.unbind_contextvars("agent")
                self._log_agent = None

    async def _on_parts(self, parts: list[bytes]) -> None:
        if len(parts) != 2:  # DEALER sends exactly one frame; anything else is malformed
            if parts:
                self._error(parts[0], ProtocolError(E.BAD_FRAME, "expected exactly one frame per message"))
            return
        t0 = time.perf_counter()
        await self.handle(parts[0], parts[1])
        self.busy_s += time.perf_counter() - t0

    def _fast_delta(self, parts: list[bytes]) -> bool:
        """The ingest hot path: a DELTA from an attached agent that watcher.serve.wire decodes and
        validates in one pass, handled without a coroutine. False, with nothing done, for any other
        frame (or an invalid one): the reference path (handle) takes it, and answers as always."""
        t0 = time.perf_counter()
        if len(parts) != 2 or (state := self.by_peer.get(parts[0])) is None:
            return False
        delta = wire.decode_delta(parts[1], self.max_frame)
        if delta is None:
            return False
        self.frames += 1
        peer = parts[0]
        if state.agent != self._log_agent:
            self._bind_agent(state.agent)
        try:  # as in handle, after _dispatch's checks (an attached agent)
            state.last_seen = time.monotonic()
            ref, base, version, ops = delta
            self.sync.apply_delta(state, base, version, ops, ref)
        except Exception as exc:  # a bug must not take the daemon down for everyone
            self._refuse(peer, exc)
        self.busy_s += time.perf_counter() - t0
        return True

    def _bind_agent(self, agent: str | None) -> None:
        # every log line of a frame (and of the compaction task it may start) names the agent;
        # (re)bound only when the agent changes: binding per frame costs more than the frame's work
        if agent is None:
            structlog.contextvars.unbind_contextvars("agent")
        else:
            structlog.contextvars.bind_contextvars(agent=agent)
        self._log_agent = agent

    async def handle(self, peer: bytes, frame: bytes) -> None:
        self.frames += 1
        known = self.by_peer.get(peer)
        agent = known.agent if known is not None else None
        if agent != self._log_agent:
            self._bind_agent(agent)
        try:
            msg = decode(frame, self.max_frame)
            self._dispatch(peer, msg)
        except Exception as exc:  # a bug must not take the daemon down for everyone
            self._refuse(peer, exc)

    def _refuse(self, peer: bytes, exc: Exception) -> None:
        """Answer a frame that failed (called from its except block): with its ProtocolError, or,
        for anything else (a bug, logged with its traceback), with INTERNAL."""
        if not isinstance(exc, ProtocolError):
            log.exception("internal_error", peer=peer.hex())
            exc = ProtocolError(E.INTERNAL, f"internal error: {type(exc).__name__}")
        self._error(peer, exc)

    def send(self, peer: bytes, msg: dict[str, Any], *, quiet: bool = False) -> None:
        self.send_frame(peer, encode(msg), msg.get("t"), quiet=quiet)

    def send_frame(self, peer: bytes, frame: bytes, t: object, *, quiet: bool = False) -> None:
        """Send an encoded frame of type ``t`` (for the log if it cannot be sent)."""
        # Inside the serving loop no receive is pending, so the plain socket view may send (no
        # future per reply); elsewhere (compaction tasks) the asyncio socket keeps its events right.
        try:
            if self._in_loop and self._drain is not None:
                _zsend(self._drain, peer, _SNDMORE_NOBLOCK)  # a routed message is atomic
                _zsend(self._drain, frame, _NOBLOCK)
            else:  # the asyncio socket's non-blocking send puts its error in the future it returns
                sent = asyncio.ensure_future(self.sock.send_multipart([peer, frame], flags=zmq.NOBLOCK))
                failed = sent.exception() if sent.done() else None
                if failed is not None:
                    raise failed
                if not sent.done():  # queued behind a send still pending (pyzmq): its error comes later
                    sent.add_done_callback(lambda f: self._send_done(f, peer, t, quiet))
        except zmq.ZMQError as exc:  # peer gone (ROUTER_MANDATORY) or its queue is full
            self._send_failed(peer, t, exc, quiet)

    def _send_done(self, sent: asyncio.Future[Any], peer: bytes, t: object, quiet: bool) -> None:
        exc = None if sent.cancelled() else sent.exception()
        if isinstance(exc, zmq.ZMQError):
            self._send_failed(peer, t, exc, quiet)
        elif exc is not None:
            log.error("send_failed", peer=peer.hex(), type=t, error=repr(exc))

    def _send_failed(self, peer: bytes, t: object, exc: zmq.ZMQError, quiet: bool) -> None:
        self.send_failures += 1
        if not quiet:
            log.warning("send_failed", peer=peer.hex(), type=t, error=str(exc))

    def add_listener(self, listener: Listener) -> None:
        """``listener(kind, agent, fields)`` hears every event from now on (metrics, MQTT)."""
        self._listeners.append(listener)

    def add_status(self, name: str, get: Callable[[], Any]) -> None:
        """STATUS's ``daemon`` gets a field ``name``, read by ``get()`` at each request."""
        self._status_extra[name] = get

    def totals(self) -> dict[str, Any]:
        """What the model and the queue did over the daemon's life (STATUS fields), for its last
        log line."""
        names = ("read_ahead", "digest_methods", "model_cost", "compaction_queue")
        return {n: v for n in names if (get := self._status_extra.get(n)) and (v := get()) is not None}

    def emit(self, kind: str, agent: str | None, **fields: Any) -> None:
        """Tell the listeners what happened; a failing listener never reaches the serving loop."""
        for listener in self._listeners:
            try:
                listener(kind, agent, fields)
            except Exception:
                log.exception("listener_failed", kind=kind)

    def _error(self, peer: bytes, exc: ProtocolError) -> None:
        self.errors[exc.code] = self.errors.get(exc.code, 0) + 1
        reply: dict[str, Any] = {"t": T.ERROR, "code": exc.code, "message": exc.message}
        if exc.ref is not None:
            reply["re"] = exc.ref
        self.send(peer, reply)

    # --- dispatch ------------------------------------------------------------------------------------
    def _dispatch(self, peer: bytes, msg: dict[str, Any]) -> None:
        t = msg["t"]
        ref = ref_of(msg)
        if t == T.HELLO:
            if msg.get("reader") is True:  # an archive reader (watcher.serve.readers): no context
                self.readers.hello(peer, msg, ref)
            else:
                self.readers.by_peer.pop(peer, None)
                attach.hello(self, peer, msg, ref)
                self.scheduler.pool.warm()  # once: its first digest is not a cold start
            return
        known = self.by_peer.get(peer)
        if t == T.STATUS:
            if known is not None:
                known.last_seen = time.monotonic()
            status(self, peer, ref, msg)
            return
        if t == T.HEARTBEAT:  # answered always; "attached" tells a client whether we know it
            if known is not None:
                known.last_seen = time.monotonic()
            beat: dict[str, Any] = {"t": T.HEARTBEAT, "attached": known is not None or peer in self.readers}
            if ref is not None:
                beat["re"] = ref
            self.send(peer, beat)
            return
        if self.readers.serve(peer, t, msg, ref):
            return
        route = self.routes.get(t)
        if route is None:
            raise ProtocolError(E.UNKNOWN_TYPE, f"unknown message type {t!r}", ref)
        if known is None:
            raise ProtocolError(E.NOT_ATTACHED, f"{t} before HELLO: send HELLO first", ref)
        known.last_seen = time.monotonic()
        route(known, msg, ref)

    # --- the daemon's side: status, reload, housekeeping, shutdown ------------------------------------
    def tokenizer_name(self) -> str:
        """How the daemon counts sections sent without ``tokens`` (WELCOME.tokenizer)."""
        return attach.tokenizer_name(self)

    def daemon_status(self) -> dict[str, Any]:
        return {
            "uptime_s": round(time.time() - self.started, 1),
            "agents": len(self.agents),
            "mirror_bytes": self.meter.total(self.agents.values()),  # what the agents' contexts hold
            "frames": self.frames,
            "send_failures": self.send_failures,
            "busy_s": round(self.busy_s, 6),
            "errors": dict(self.errors),
            "degraded": self.summarizer.degraded,
            "degraded_reason": self.summarizer.degraded_reason,
            "model": self.cfg.model.path,
            "summarizer": self.summarizer.engine.stats() if self.summarizer.engine is not None else None,
        } | {name: get() for name, get in self._status_extra.items()}

    def apply_config(self, cfg: Config, summarizer: Summarizer | None = None) -> None:
        """A reload (watcher.runtime.reload): the new configuration, a new summarizer if the model
        changed, and the settings of attached agents that an ``[agents.<id>]`` table names.
        Synchronous, so it is atomic between two frames."""
        old, self.cfg = self.cfg, cfg
        if summarizer is not None:
            self.summarizer = summarizer
            self.check_degraded()
        if old.store != cfg.store:  # watcher.store.retention reads these when it enforces
            self.store.retention.days = cfg.store.retention_days
            self.store.retention.max_archive_mb = cfg.store.max_archive_mb
        attach.resolve_attached(self, cfg)

    def check_degraded(self) -> None:
        """Emit degraded/recovered when the summarizer's state changes."""
        self.housekeeping.check_degraded()

    def store_housekeeping(self, now: float | None = None) -> None:
        """Age out open proposals of agents that did not come back; apply [store] retention."""
        self.housekeeping.store(now)

    def expire(self, timeout_s: float) -> None:
        """Detach agents silent for longer than ``timeout_s``."""
        self.housekeeping.expire(timeout_s)

    def farewell(self, reason: str = "shutdown") -> None:
        """Tell every attached agent the daemon is going away (before the socket closes)."""
        self.housekeeping.farewell(reason)

    async def drain(self) -> None:
        await self.scheduler.close()
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
