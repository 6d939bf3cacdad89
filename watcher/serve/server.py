"""The daemon's side of the wire: one ROUTER socket, a dispatcher, and the compaction jobs.

Everything a client sends is untrusted. Each frame is decoded and validated (ipc.protocol); any
problem becomes an ERROR reply to that peer only, and the loop goes on serving everyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog
import zmq
import zmq.asyncio

from ipc.context import Context, ContextError
from ipc.protocol import (
    MAX_DETAIL_LEN,
    MAX_SNAPSHOT_SECTIONS,
    SUPPORTED_VERSIONS,
    E,
    Op,
    ProtocolError,
    T,
    decode,
    encode,
    field,
    name_ok,
    negotiate,
    parse_checkpoint,
    parse_delta,
    parse_hello,
    parse_recall,
    parse_restore,
    parse_snapshot,
    ref_of,
)
from ipc.sections import Section
from summarizer.digest import Summarizer
from watcher.config.settings import Config, resolve_agent
from watcher.observe import logs
from watcher.planning.planner import Plan, Watermarks, early_cap, plan, trigger_tokens
from watcher.planning.scoring import Scorer, score_params
from watcher.serve import limits, strategies, wire
from watcher.serve.agents import AgentState, Pending, StagedSnapshot, prepare_plan
from watcher.serve.auth import AuthError, PeerInfo, authenticate
from watcher.serve.checkpoints import checkpoint as checkpoint_op
from watcher.serve.checkpoints import restore as restore_op
from watcher.serve.compactor import build_proposal, forget
from watcher.serve.recall import check_claim, recall
from watcher.serve.recovery import Reconciled, reconcile
from watcher.serve.scheduler import FairScheduler
from watcher.store.crashpoints import crashpoint
from watcher.store.store import ArchiveView, Store, StoreError, TransitionError

log = logs.get("compactd.server")

# Observers of what happens (metrics, MQTT events): listener(kind, agent or None, fields).
# Kinds: proposal_sent/applied/rejected/dropped, digest, headroom_alert/ok, degraded, recovered.
Listener = Callable[[str, str | None, dict[str, Any]], None]

DRAIN_BATCH = 256  # frames handled per wake-up of the serving loop before it yields
RESYNC_REPEAT_S = 2.0  # while unsynced, a DELTA without id repeats the RESYNC at most this often
# The ingest hot path calls the Cython socket under zmq.Socket directly (zmq.Socket's send and
# recv_multipart are Python wrappers around it: as much again per call), with plain int flags
# (or-ing the enums costs more than sending a reply).
_zsend = zmq.backend.Socket.send
_zrecv = zmq.backend.Socket.recv
_zget = zmq.backend.Socket.get
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE_NOBLOCK = int(zmq.SNDMORE | zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)


# Requests that need an attached agent → the Server method handling them (state, msg, ref).
_HANDLERS = {
    T.SNAPSHOT: "_snapshot",
    T.DELTA: "_delta",
    T.ACK: "_ack",
    T.NACK: "_nack",
    T.RECALL: "_recall",
    T.BYE: "_bye",
    T.CHECKPOINT: "_checkpoint",
    T.RESTORE: "_restore",
}
RETENTION_EVERY_S = 600.0  # how often housekeeping applies [store] retention
GC_FREEZE_EVERY_S = 1.0  # see gc_pacer
GC_FULL_EVERY_S = 300.0
# How long a thread (a plan, archive rows: CPU-bound Python) may hold the GIL while the serving loop
# waits for it; Python's default is 5 ms. Set while the server runs.
SWITCH_INTERVAL_S = 0.001
PLAN_ATTEMPTS = 3  # plans in a thread on a snapshot the mirror changed under, before one on the loop


async def gc_pacer(freeze_every_s: float = GC_FREEZE_EVERY_S, full_every_s: float = GC_FULL_EVERY_S) -> None:
    """Keep Python's full garbage collections off the ingest path.

    A full (generation 2) collection visits every tracked object: with 200 agents' mirrors and
    their scoring features (~100k objects, a million references) it stopped the serving loop for
    90-200 ms every few seconds under load. Objects that survived a second are moved out of the
    collector's view (gc.freeze: O(1)), so the collections that the allocation rate triggers visit
    only younger objects; everything is handed back (gc.unfreeze) and collected in full once every
    ``full_every_s``, which frees reference cycles among older objects (there are few: a
    collection under load found 0-500 in 100k objects), and when the pacer stops. Memory freed by
    reference counting (folded sections, detached agents' mirrors) is freed at once as before."""
    last_full = time.monotonic()
    try:
        while True:
            await asyncio.sleep(freeze_every_s)
            if time.monotonic() - last_full >= full_every_s:
                gc.unfreeze()
                gc.collect()
                last_full = time.monotonic()
            gc.freeze()
    finally:
        gc.unfreeze()


class _Switch:
    """SWITCH_INTERVAL_S while at least one server runs in the process; Python's own after."""

    running = 0
    saved = 0.0

    @classmethod
    def enter(cls) -> None:
        if cls.running == 0:
            cls.saved = sys.getswitchinterval()
            sys.setswitchinterval(min(cls.saved, SWITCH_INTERVAL_S))
        cls.running += 1

    @classmethod
    def leave(cls) -> None:
        cls.running -= 1
        if cls.running == 0:
            sys.setswitchinterval(cls.saved)


def _unchanged(snapshot: Sequence[Section], ctx: Context) -> bool:
    """Does the mirror still hold exactly ``snapshot`` (the same section objects, in order)?"""
    return len(snapshot) == len(ctx) and all(a is b for a, b in zip(snapshot, ctx, strict=False))


class Server:
    def __init__(
        self, sock: zmq.asyncio.Socket, cfg: Config, summarizer: Summarizer, store: Store | None = None
    ) -> None:
        self.sock = sock
        self.store = store if store is not None else Store.memory()  # watcher.store.store: archive first
        self.peer_info = PeerInfo()  # what the transport proves about peers (watcher.serve.auth)
        self._retention_at = 0.0
        self.cfg = cfg
        self.summarizer = summarizer
        self.max_frame = cfg.daemon.max_frame_bytes
        self.by_peer: dict[bytes, AgentState] = {}
        self.agents: dict[str, AgentState] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.started = time.time()
        self.frames = 0
        self.busy_s = 0.0  # time spent handling frames (decode → validate → mirror → plan → reply)
        self._drain: zmq.Socket[bytes] | None = None  # plain view of sock (run())
        self._in_loop = False  # handling frames inside run(): no receive is pending
        self._log_agent: str | None = None  # the agent bound in the logging context
        self.errors: dict[str, int] = {}
        self.on_change: Callable[[], None] = lambda: None
        self.listeners: list[Listener] = []
        self.status_extra: dict[str, Callable[[], Any]] = {}  # more "daemon" fields for STATUS
        self.meter = limits.Meter()  # bytes all mirrors hold (watcher.serve.limits)
        self.scheduler = FairScheduler(self.tasks)  # compaction jobs: one at a time, round-robin
        self.status_extra["compaction_queue"] = self.scheduler.stats
        self._degraded_seen = summarizer.degraded

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
        _Switch.enter()
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
            _Switch.leave()
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
            self._apply_delta(state, base, version, ops, ref)
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
            await self._dispatch(peer, msg)
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
            else:
                self.sock.send_multipart([peer, frame], flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # peer gone (ROUTER_MANDATORY) or its queue is full
            if not quiet:
                log.warning("send_failed", peer=peer.hex(), type=t, error=str(exc))

    def emit(self, kind: str, agent: str | None, **fields: Any) -> None:
        """Tell the listeners what happened; a failing listener never reaches the serving loop."""
        for listener in self.listeners:
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
    async def _dispatch(self, peer: bytes, msg: dict[str, Any]) -> None:
        t = msg["t"]
        ref = ref_of(msg)
        if t == T.HELLO:
            self._hello(peer, msg, ref)
            return
        if t == T.STATUS:
            self._touch(peer)
            self._status(peer, ref, msg)
            return
        if t == T.HEARTBEAT:  # answered always; "attached" tells a client whether we know it
            self._touch(peer)
            beat: dict[str, Any] = {"t": T.HEARTBEAT, "attached": peer in self.by_peer}
            if ref is not None:
                beat["re"] = ref
            self.send(peer, beat)
            return
        name = _HANDLERS.get(t)
        if name is None:
            raise ProtocolError(E.UNKNOWN_TYPE, f"unknown message type {t!r}", ref)
        state = self.by_peer.get(peer)
        if state is None:
            raise ProtocolError(E.NOT_ATTACHED, f"{t} before HELLO: send HELLO first", ref)
        state.last_seen = time.monotonic()
        getattr(self, name)(state, msg, ref)

    def _touch(self, peer: bytes) -> None:
        if (state := self.by_peer.get(peer)) is not None:
            state.last_seen = time.monotonic()

    def _hello(self, peer: bytes, msg: dict[str, Any], ref: int | None) -> None:
        hello = parse_hello(msg)
        chosen = negotiate(hello.versions, ref)
        try:  # identity from authentication, not from the claimed name (watcher.serve.auth)
            ident = authenticate(hello, self.peer_info, self.cfg)
        except AuthError as exc:
            log.warning("hello_refused", agent=hello.agent, reason=str(exc))
            raise ProtocolError(E.UNAUTHORIZED, f"HELLO: {exc}", ref) from None
        try:
            eff = resolve_agent(
                self.cfg,
                hello.agent,
                requested_budget=hello.budget,
                requested_reserve=hello.reserve,
                requested_policy=hello.policy,
                requested_planner=hello.planner,
            )
        except ValueError as exc:
            raise ProtocolError(E.INVALID, f"HELLO: {exc}", ref) from None
        budget, reserve, policy = eff.budget, eff.reserve, eff.policy
        marks = Watermarks(budget, reserve, eff.low_watermark)
        old = self.agents.get(hello.agent)
        if old is None:
            limits.check_agents(self.cfg.daemon, len(self.agents), hello.agent, ref)
        if old is not None:
            self.by_peer.pop(old.peer, None)
        prev = self.by_peer.get(peer)  # this connection was attached as another agent
        if prev is not None and self.agents.get(prev.agent) is prev:
            self.agents.pop(prev.agent, None)
        state = AgentState(hello.agent, hello.session, peer, marks, policy, tokenizer=hello.tokenizer)
        state.planner = eff.planner
        state.scorer = Scorer(score_params(self.cfg.compaction))
        state.archive = ArchiveView(self.store.archive, ident.agent, hello.session)  # durable, all sessions
        state.ids = self.store.ids  # refs and proposal ids numbered by the store, never repeated
        self._attach_store(state, hello.resume, ident.method)
        self.agents[hello.agent] = state
        self.by_peer[peer] = state
        log.info("agent_attached", agent=hello.agent, session=hello.session, budget=budget, reserve=reserve)
        self.send(
            peer,
            {
                "t": T.WELCOME,
                "re": ref,
                "version": chosen,
                "versions": list(SUPPORTED_VERSIONS),
                "agent": hello.agent,
                "session": hello.session,
                "budget": budget,
                "reserve": reserve,
                "policy": policy,
                "planner": eff.planner,
                "high_watermark": marks.high,
                "low_watermark": marks.low,
                "context_version": state.ctx.version,
                "max_frame": self.max_frame,
                "heartbeat_s": self.cfg.daemon.heartbeat_s,
                "agent_timeout_s": self.cfg.daemon.agent_timeout_s,
                "tokenizer": self._tokenizer_name(),
                "resumed": hello.resume,
            },
        )
        self.on_change()

    def _attach_store(self, state: AgentState, resume: bool, method: str) -> None:
        """Record the attach; settle what a previous connection of this agent left open. A resuming
        agent sends its context next (SNAPSHOT): its session's open proposals are settled then."""
        self.store.agents.touch(state.agent, state.session, method)
        if resume:
            state.synced = False
            self.store.proposals.expire_open(
                state.agent, except_session=state.session, reason="the agent resumed another session"
            )
        else:
            self.store.proposals.expire_open(state.agent, reason="the agent attached afresh")

    def _tokenizer_name(self) -> str:
        """How the daemon counts sections sent without ``tokens`` (WELCOME.tokenizer)."""
        engine = self.summarizer.engine
        if engine is not None and self.summarizer.count == engine.count_tokens:
            return f"gguf:{engine.settings.path.rsplit('/', 1)[-1]}"
        return "approx:chars/3"

    def _snapshot(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        snap = parse_snapshot(msg, self.max_frame)
        version = snap.version
        staged = None if snap.part == 0 else state.staged
        state.staged = None
        part_bytes = limits.sections_bytes(snap.sections)
        if snap.part and (staged is None or (staged.version, staged.next_part) != (version, snap.part)):
            raise ProtocolError(
                E.INVALID, f"SNAPSHOT: part {snap.part} of version {version} out of order; resend part 0", ref
            )
        if snap.more or staged is not None:  # a multi-part snapshot: stage until the last part
            staged = staged or StagedSnapshot(version)
            if len(staged.sections) + len(snap.sections) > MAX_SNAPSHOT_SECTIONS:
                raise ProtocolError(
                    E.LIMIT, f"SNAPSHOT: more than {MAX_SNAPSHOT_SECTIONS} sections in all parts", ref
                )
            n = len(staged.sections) + len(snap.sections)
            self._check_size("SNAPSHOT", state, n, staged.nbytes + part_bytes, ref)
            staged.sections.extend(self._counted(snap.sections))
            staged.nbytes += part_bytes
            staged.next_part += 1
            if snap.more:
                state.staged = staged
                return
            sections, nbytes = staged.sections, staged.nbytes
        else:
            self._check_size("SNAPSHOT", state, len(snap.sections), part_bytes, ref)
            sections, nbytes = self._counted(snap.sections), part_bytes
        try:
            state.ctx.reset(sections, version)
        except ContextError as exc:
            raise ProtocolError(E.INVALID, f"SNAPSHOT: {exc}", ref) from None
        self.meter.set(state, nbytes)
        state.synced = True
        state.pending.clear()  # proposals computed against the old mirror are void...
        settled = self._settle(state)  # ...unless the store says they are still open (watcher.serve.recovery)
        self._synced(state, ref)
        if settled.reoffered:
            self.store.sync_wal()  # durable before they leave again (rare: after a restart)
        for pending in settled.reoffered:
            self.send(state.peer, pending.proposal.to_wire())

    def _settle(self, state: AgentState) -> Reconciled:
        out = reconcile(self.store, state)
        for p in out.acked:  # applied, but the ACK was lost (e.g. with a killed daemon)
            state.compactions += 1
            state.tokens_saved += p.tokens_before - p.tokens_after
            state.invalidated_tokens += p.invalidated_prefix_tokens
        if out.acked or out.reoffered or out.expired:
            log.info(
                "proposals_settled",
                agent=state.agent,
                acked=[p.proposal for p in out.acked],
                reoffered=[p.proposal.proposal for p in out.reoffered],
                expired=out.expired,
            )
        return out

    def _delta(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        base, version, ops = parse_delta(msg, self.max_frame)
        self._apply_delta(state, base, version, ops, ref)

    def _apply_delta(
        self, state: AgentState, base: int, version: int, ops: list[Op], ref: int | None
    ) -> None:
        """A valid DELTA (parsed by _delta, or by watcher.serve.wire on the fast path)."""
        state.staged = None  # a DELTA in the middle of a multi-part SNAPSHOT voids it
        if not state.synced:  # waiting for the SNAPSHOT we asked for: deltas until then are moot
            if ref is not None or time.monotonic() - state.resync_at >= RESYNC_REPEAT_S:
                self._resync(state, "a SNAPSHOT is needed first (RESYNC pending)", ref)
            return
        if base != state.ctx.version or version != base + 1:
            self._resync(
                state, f"delta {base}->{version} does not follow mirror version {state.ctx.version}", ref
            )
            return
        total = self.meter.total(self.agents.values())
        nbytes = limits.check_delta(self.cfg.daemon, state, ops, total, ref)
        for op in ops:
            if op.sections and not all(s.tokens for s in op.sections):
                ops = [type(o)(o.op, tuple(self._counted(o.sections)), o.ids) for o in ops]
                break
        try:
            state.ctx.apply_ops(ops, version)
        except ContextError as exc:
            self._resync(state, str(exc), ref)
            return
        self.meter.set(state, nbytes)
        self._synced(state, ref)

    def _ack(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        pid = field(msg, "proposal", str, check=name_ok)
        version = field(msg, "version", int)
        pending = state.pending.pop(pid, None)
        if pending is None:
            raise ProtocolError(E.UNKNOWN_PROPOSAL, f"ACK: no pending proposal {pid!r}", ref)
        crashpoint("ack")  # a kill here: the SNAPSHOT after the restart settles it (watcher.serve.recovery)
        if version != state.ctx.version + 1:
            self._resync(
                state, f"ACK at version {version} does not follow mirror version {state.ctx.version}", ref
            )
            return
        try:
            state.ctx.apply_proposal(pending.proposal, version)
        except ContextError as exc:
            self._resync(state, f"ACK of {pid}: {exc}", ref)
            return
        self.meter.set(state, limits.mirror_bytes(state.ctx))
        self._settled(state, pid, "acked", version=version)
        p = pending.proposal
        state.compactions += 1
        state.tokens_saved += p.tokens_before - p.tokens_after
        state.invalidated_tokens += p.invalidated_prefix_tokens
        log.info(
            "proposal_applied",
            agent=state.agent,
            proposal=pid,
            saved=p.tokens_before - p.tokens_after,
            usage=round(state.usage, 3),
        )
        self.emit(
            "proposal_applied",
            state.agent,
            proposal=pid,
            saved=p.tokens_before - p.tokens_after,
            invalidated_prefix_tokens=p.invalidated_prefix_tokens,
            tokens=state.ctx.tokens,
            usage=round(state.usage, 4),
        )
        self._synced(state, ref)

    def _nack(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        pid = field(msg, "proposal", str, check=name_ok)
        reason = field(
            msg,
            "reason",
            str,
            check=lambda r: r in ("stale", "rejected", "failed"),
            what="one of stale, rejected, failed",
        )
        detail = field(msg, "detail", str, default="", check=lambda d: len(d) <= MAX_DETAIL_LEN)
        if state.pending.pop(pid, None) is None:
            if self.store.proposals.state_of(state.agent, pid) in ("acked", "nacked", "expired"):
                return  # a second copy of a re-offered proposal, already settled
            raise ProtocolError(E.UNKNOWN_PROPOSAL, f"NACK: no pending proposal {pid!r}", ref)
        self._settled(state, pid, "nacked", reason=f"{reason}: {detail}" if detail else reason)
        state.nacks += 1
        log.info("proposal_rejected", agent=state.agent, proposal=pid, reason=reason, detail=detail)
        self.emit("proposal_rejected", state.agent, proposal=pid, reason=reason)
        self._maybe_compact(state)

    def _settled(self, state: AgentState, pid: str, to: str, **kw: Any) -> None:
        try:
            self.store.proposals.transition(state.agent, pid, to, **kw)
        except TransitionError as exc:  # aged out meanwhile: the agent's context still decides
            log.warning("proposal_transition_refused", agent=state.agent, proposal=pid, error=str(exc))

    def _recall(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        """Originals by archive ref, section or digest id, or a text search; own scope only."""
        self.send(state.peer, recall(self.store, state.agent, parse_recall(msg), ref, self.max_frame))

    def _checkpoint(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        self.send(state.peer, checkpoint_op(self.store, state, parse_checkpoint(msg), ref, self.max_frame))

    def _restore(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        req = parse_restore(msg)
        reply = restore_op(self.store, state, req, ref, self.max_frame, self.summarizer.count)
        self.meter.set(state, limits.mirror_bytes(state.ctx))  # (it was this agent's mirror once)
        log.info(
            "checkpoint_restored",
            agent=state.agent,
            checkpoint=req.name,
            version=reply["version"],
            forced=reply["forced"],
            expected_tokens=reply["expected_tokens"],
            actual_tokens=reply["actual_tokens"],
        )
        self.send(state.peer, reply)
        self._maybe_compact(state)

    def _bye(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        self.by_peer.pop(state.peer, None)
        self.agents.pop(state.agent, None)
        self.store.proposals.expire_open(state.agent, reason="the agent said BYE")  # its archive stays
        log.info("agent_detached", agent=state.agent)
        self.send(state.peer, {"t": T.BYE, "re": ref} if ref is not None else {"t": T.BYE})
        self.on_change()

    def _status(self, peer: bytes, ref: int | None, msg: dict[str, Any] | None = None) -> None:
        state = self.by_peer.get(peer)
        claimed = field(msg, "agent", str, default=None, check=name_ok) if msg is not None else None
        if state is not None:  # an agent sees itself only
            check_claim(claimed, state.agent, "STATUS", ref)
            agents = [state]
        else:  # the operator's view (compactd status): counters of every agent, no content
            agents = [a for a in self.agents.values() if claimed is None or a.agent == claimed]
        self.send(
            peer,
            {
                "t": T.STATE,
                "re": ref,
                "daemon": self.daemon_status(),
                "agents": [a.snapshot() for a in agents],
            },
        )

    def daemon_status(self) -> dict[str, Any]:
        return {
            "uptime_s": round(time.time() - self.started, 1),
            "agents": len(self.agents),
            "mirror_bytes": self.meter.total(self.agents.values()),  # what the agents' contexts hold
            "frames": self.frames,
            "busy_s": round(self.busy_s, 6),
            "errors": dict(self.errors),
            "degraded": self.summarizer.degraded,
            "degraded_reason": self.summarizer.degraded_reason,
            "model": self.cfg.model.path,
            "summarizer": self.summarizer.engine.stats() if self.summarizer.engine is not None else None,
        } | {name: get() for name, get in self.status_extra.items()}

    # --- sync & compaction ---------------------------------------------------------------------------
    def _check_size(self, what: str, state: AgentState, sections: int, nbytes: int, ref: int | None) -> None:
        others = self.meter.total(self.agents.values()) - limits.held_bytes(state)
        limits.check_size(self.cfg.daemon, what, state.agent, sections, nbytes, others, ref)

    def _counted(self, sections: Sequence[Section]) -> list[Section]:
        return [s if s.tokens else s.with_tokens(self.summarizer.count(s.text)) for s in sections]

    def _synced(self, state: AgentState, ref: int | None) -> None:
        if ref is not None:  # encode({"t": SYNCED, "re": ref, "version": ..., "tokens": ...})
            self.send_frame(state.peer, wire.synced(ref, state.ctx.version, state.ctx.tokens), T.SYNCED)
        self._maybe_compact(state)
        self._headroom(state)

    def _headroom(self, state: AgentState) -> None:
        """Alert once when headroom is below the reserve and nothing will fix it (over budget, auto
        compaction stuck, or a manual/off policy); say so again when it is back above the reserve."""
        tokens, marks = state.ctx.tokens, state.marks
        over_high = tokens >= marks.high
        alarming = tokens > marks.budget or (over_high and (state.policy != "auto" or state.stuck_reported))
        if alarming and not state.headroom_alert:
            state.headroom_alert = True
            fields = {"tokens": tokens, "budget": marks.budget, "reserve": marks.reserve}
            self.emit("headroom_alert", state.agent, headroom=round(1 - state.usage, 4), **fields)
        elif state.headroom_alert and not over_high:
            state.headroom_alert = False
            self.emit("headroom_ok", state.agent, headroom=round(1 - state.usage, 4), tokens=tokens)

    def _resync(self, state: AgentState, reason: str, ref: int | None = None) -> None:
        """Ask for a SNAPSHOT; ``re`` names the request that found the gap (it is answered by the
        SYNCED of the SNAPSHOT that the client sends with that same id)."""
        state.synced = False
        state.pending.clear()
        state.resync_at = time.monotonic()
        log.info("resync_requested", agent=state.agent, reason=reason)
        reply: dict[str, Any] = {"t": T.RESYNC, "reason": reason, "version": state.ctx.version}
        if ref is not None:
            reply["re"] = ref
        self.send(state.peer, reply)

    def _maybe_compact(self, state: AgentState) -> None:
        state.lookahead.observe(state.ctx.tokens, time.monotonic())  # O(1): growth per turn
        if state.policy != "auto" or state.job_running or state.pending or not state.synced:
            return
        if state.ctx.tokens <= self._trigger(state):
            state.stuck_reported = False
            state.stuck_tokens = 0
            return
        if state.stuck_tokens and state.ctx.tokens < state.stuck_tokens + state.marks.budget // 50:
            return  # nothing foldable was left; wait until the context has grown before trying again
        state.job_running = True  # queued or running (watcher.serve.scheduler); planned when its turn comes
        state.job_submitted = time.monotonic()
        self.scheduler.submit(state.agent, lambda: self._run_job(state))

    def _trigger(self, state: AgentState) -> int:
        """Compaction is considered once the context holds more than this many tokens."""
        baseline = strategies.get(state.planner)  # reactive, masking: the baselines replay compares
        if baseline is not None:
            return baseline.trigger(state.marks)
        return trigger_tokens(state.marks, self._ahead(state))

    def _ahead(self, state: AgentState) -> int:
        """Tokens the context is expected to grow by while a digest is written (watcher.planning.lookahead).

        With a model, as much as a model digest needs, if planning that early is allowed (the
        planner caps how early, :func:`watcher.planning.planner.early_cap`); else the digest will be
        deterministic anyway (:meth:`_summarizer_for`), so plan only as early as that needs: a
        later plan has more turns to choose what to fold from."""
        if not self.cfg.compaction.lookahead:
            return 0
        if self.summarizer.engine is not None:
            ahead = state.lookahead.tokens_ahead(model=True)
            if ahead <= early_cap(state.marks):
                return ahead
        return state.lookahead.tokens_ahead(model=False)

    def _summarizer_for(self, state: AgentState, p: Any) -> Summarizer:
        """The model (through the scheduler's lane) when its digest would be ready before the high
        watermark; else a deterministic digest now: the headroom comes first (DESIGN: never worse)."""
        if (
            isinstance(p, Plan)
            and strategies.get(state.planner) is None  # a baseline digests as it would (reactive waits)
            and self.cfg.compaction.lookahead
            and self.summarizer.engine is not None
            and not state.lookahead.model_in_time(state.ctx.tokens, state.marks.high)
        ):
            return self.scheduler.pool.summarizer(self.summarizer)
        return self.scheduler.pick(self.summarizer)

    def _job_wanted(self, state: AgentState) -> bool:
        """Is a compaction of the agent's mirror as it is now still wanted?"""
        return (
            self.agents.get(state.agent) is state
            and state.policy == "auto"
            and not state.pending
            and state.synced
            and state.ctx.tokens > self._trigger(state)
        )

    def _plan_on(self, state: AgentState, sections: list[Section], growth: int) -> Any:
        """The plan for ``sections`` (a snapshot of the mirror): pure but for the agent's scorer
        cache, which only this agent's job (one at a time: watcher.serve.scheduler) touches."""
        baseline = strategies.get(state.planner)
        if baseline is not None:
            return baseline.plan(sections, state.marks, self.cfg.compaction.fresh_turns)
        return plan(
            sections,
            state.marks,
            self.cfg.compaction.fresh_turns,
            strategy=state.planner,
            scorer=state.scorer,
            growth=growth,
            cache_weight=self.cfg.compaction.cache_weight,
        )

    async def _plan(self, state: AgentState) -> tuple[bool, Any]:
        """(wanted, plan): the plan of the mirror as it is when this returns, computed in a thread
        (a plan costs 3-10 ms of CPU with ~150 sections; on the loop it would hold up every agent's
        deltas; in a thread the loop waits at most a GIL switch interval for it). On a snapshot of
        the mirror: if a delta changed the mirror meanwhile, planned again, and after
        :data:`PLAN_ATTEMPTS` on the loop, so that the plan is always that of the mirror it is built
        on. ``wanted`` False: the job is not, or no longer, wanted (:meth:`_job_wanted`)."""
        if not self._job_wanted(state):
            return False, None
        for _ in range(PLAN_ATTEMPTS):
            sections = list(state.ctx)
            p = await asyncio.to_thread(self._plan_on, state, sections, self._ahead(state))
            if not self._job_wanted(state):
                return False, None
            if _unchanged(sections, state.ctx):
                return True, p
        return True, self._plan_on(state, list(state.ctx), self._ahead(state))

    async def _run_job(self, state: AgentState) -> None:
        """The agent's turn in the scheduler: plan on the mirror as it is now, then compact."""
        if strategies.get(state.planner) is None and state.planner != "recency":
            await prepare_plan(state)  # features of new sections, in slices: other agents go on
        wanted, p = await self._plan(state)
        if not wanted:
            state.job_running = False
            return
        if p is None:
            state.job_running = False
            if state.ctx.tokens < state.marks.high:  # early (look-ahead): not a headroom problem yet
                state.stuck_tokens = state.ctx.tokens
                return
            self._stuck(state, "only anchors and small regions are left")
            return
        if isinstance(p, Plan):
            log.info(
                "compaction_planned",
                agent=state.agent,
                strategy=p.strategy,
                tokens=state.ctx.tokens,
                need=p.need,
                region_tokens=p.tokens,
                sections=len(p.ids),
                value=p.value,
                invalidated_prefix_tokens=p.invalidated_prefix_tokens,
                tokens_ahead=self._ahead(state),
                queued_s=round(time.monotonic() - state.job_submitted, 3),
            )
        await self._compact(state, p)

    def _stuck(self, state: AgentState, why: str) -> None:
        """Headroom cannot be restored now: say so once, and do not loop."""
        state.stuck_tokens = state.ctx.tokens
        if not state.stuck_reported:
            state.stuck_reported = True
            log.warning(
                "cannot_restore_headroom",
                agent=state.agent,
                tokens=state.ctx.tokens,
                budget=state.marks.budget,
                reason=why,
            )
            self._headroom(state)

    async def _compact(self, state: AgentState, p: Any) -> None:
        t0 = time.monotonic()
        baseline = strategies.get(state.planner)
        summarizer = self._summarizer_for(state, p)  # model or not: chosen before the first await
        try:
            build = baseline.build if baseline is not None else build_proposal
            pending = await build(state, p, summarizer)
        except Exception:
            log.exception("compaction_failed", agent=state.agent)
            pending = None
        finally:
            state.job_running = False
            self.emit("digest", state.agent, seconds=time.monotonic() - t0)
            if isinstance(p, Plan):
                used_model = summarizer is self.summarizer and self.summarizer.engine is not None
                state.lookahead.job_done(time.monotonic() - state.job_submitted, p.tokens, used_model)
            self.check_degraded()
        if self.agents.get(state.agent) is not state:
            if pending is not None:
                self._abandon(state, pending)
            return
        if pending is None:
            self._stuck(state, "the digest would not be smaller than its region")
            return
        reason = state.ctx.stale_reason(pending.proposal)
        if reason:  # the mirror moved under the job: plan again on the next change
            self._abandon(state, pending)
            log.info("proposal_dropped", agent=state.agent, reason=reason)
            self.emit("proposal_dropped", state.agent, reason=reason)
            self._maybe_compact(state)
            return
        if not self._record(state, pending):
            return
        state.pending[pending.proposal.proposal] = pending  # (no second job starts meanwhile)
        await asyncio.to_thread(self.store.sync_wal)  # durable before it leaves, off the loop
        crashpoint("before_send")
        if self.agents.get(state.agent) is not state:
            return  # gone meanwhile: settled when it resumes (re-offered) or attaches afresh
        pr = pending.proposal
        log.info(
            "proposal_sent",
            agent=state.agent,
            proposal=pr.proposal,
            sections=len(pr.replaces),
            tokens_before=pr.tokens_before,
            tokens_after=pr.tokens_after,
            method=pending.method,
        )
        self.send(state.peer, pr.to_wire())
        self.emit(
            "proposal_sent",
            state.agent,
            proposal=pr.proposal,
            sections=len(pr.replaces),
            tokens_before=pr.tokens_before,
            tokens_after=pr.tokens_after,
            invalidated_prefix_tokens=pr.invalidated_prefix_tokens,
            method=pending.method,
        )

    def _record(self, state: AgentState, pending: Pending) -> bool:
        """planned → sent, committed before the proposal leaves (its originals already are)."""
        p = pending.proposal
        try:
            self.store.proposals.record(state.agent, state.session, p, pending.method)
            crashpoint("planned")
            self.store.proposals.transition(state.agent, p.proposal, "sent")
        except (StoreError, sqlite3.Error):
            log.exception("store_failed", agent=state.agent, proposal=p.proposal)
            with contextlib.suppress(StoreError, sqlite3.Error):
                self.store.proposals.transition(state.agent, p.proposal, "expired", reason="store failure")
            self._abandon(state, pending)
            return False
        return True

    def _abandon(self, state: AgentState, pending: Pending) -> None:
        """A built proposal that will not be sent: its archive entry goes (nothing refers to it)."""
        for ref in pending.proposal.archive:
            forget(state, ref)

    def store_housekeeping(self, now: float | None = None) -> None:
        """Age out open proposals of agents that did not come back; apply [store] retention."""
        now = time.time() if now is None else now
        cutoff = now - self.cfg.daemon.agent_timeout_s
        for agent in self.store.proposals.agents_with_open():
            if agent not in self.agents:
                n = self.store.proposals.expire_open(
                    agent, older_than=cutoff, reason="its agent did not come back"
                )
                if n:
                    log.info("proposals_expired", agent=agent, count=n)
        if now - self._retention_at >= RETENTION_EVERY_S:
            self._retention_at = now
            self.store.retention.days = self.cfg.store.retention_days
            self.store.retention.max_archive_mb = self.cfg.store.max_archive_mb
            ev = self.store.retention.enforce(now)
            if ev.by_age or ev.by_size:
                log.info("archive_evicted", by_age=ev.by_age, by_size=ev.by_size, bytes=ev.bytes)

    def check_degraded(self) -> None:
        """Emit degraded/recovered when the summarizer's state changes."""
        now = self.summarizer.degraded
        if now != self._degraded_seen:
            self._degraded_seen = now
            if now:
                log.warning("degraded", reason=self.summarizer.degraded_reason)
                self.emit("degraded", None, reason=self.summarizer.degraded_reason)
            else:
                log.info("recovered")
                self.emit("recovered", None)

    def expire(self, timeout_s: float) -> None:
        now = time.monotonic()
        for agent, state in list(self.agents.items()):
            if now - state.last_seen > timeout_s:
                log.info("agent_expired", agent=agent, silent_s=round(now - state.last_seen, 1))
                self.agents.pop(agent, None)
                self.by_peer.pop(state.peer, None)
                # if it is still there after all, it learns why its next request says not_attached
                self.send(state.peer, {"t": T.BYE, "reason": "expired"}, quiet=True)

    def farewell(self, reason: str = "shutdown") -> None:
        """Tell every attached agent the daemon is going away (before the socket closes)."""
        for state in list(self.agents.values()):
            self.send(state.peer, {"t": T.BYE, "reason": reason}, quiet=True)

    async def drain(self) -> None:
        await self.scheduler.close()
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
