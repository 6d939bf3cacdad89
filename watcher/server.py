"""The daemon's side of the wire: one ROUTER socket, a dispatcher, and the compaction jobs.

Everything a client sends is untrusted. Each frame is decoded and validated (ipc.protocol); any
problem becomes an ERROR reply to that peer only, and the loop goes on serving everyone else.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import zmq
import zmq.asyncio

from ipc.context import ContextError
from ipc.protocol import (
    PROTOCOL_VERSION,
    E,
    ProtocolError,
    T,
    decode,
    encode,
    field,
    ids_field,
    name_ok,
    parse_hello,
    parse_ops,
    sections_field,
)
from ipc.sections import Section
from summarizer.digest import Summarizer
from watcher import logs
from watcher.agents import AgentState
from watcher.compactor import build_proposal
from watcher.config import Config, resolve_agent
from watcher.planner import Watermarks, plan

log = logs.get("compactd.server")


class Server:
    def __init__(self, sock: zmq.asyncio.Socket, cfg: Config, summarizer: Summarizer) -> None:
        self.sock = sock
        self.cfg = cfg
        self.summarizer = summarizer
        self.max_frame = cfg.daemon.max_frame_bytes
        self.by_peer: dict[bytes, AgentState] = {}
        self.agents: dict[str, AgentState] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.started = time.time()
        self.frames = 0
        self.errors: dict[str, int] = {}
        self.on_change: Callable[[], None] = lambda: None

    # --- loop ----------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        stopper = asyncio.create_task(stop.wait(), name="server-stop")
        try:
            while not stop.is_set():
                recv = asyncio.ensure_future(self.sock.recv_multipart(copy=True))
                done, _ = await asyncio.wait({recv, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if recv not in done:
                    recv.cancel()
                    break
                parts = recv.result()
                if len(parts) != 2:  # DEALER sends exactly one frame; anything else is malformed
                    if parts:
                        self._error(
                            parts[0], ProtocolError(E.BAD_FRAME, "expected exactly one frame per message")
                        )
                    continue
                await self.handle(parts[0], parts[1])
        finally:
            stopper.cancel()

    async def handle(self, peer: bytes, frame: bytes) -> None:
        self.frames += 1
        try:
            msg = decode(frame, self.max_frame)
            await self._dispatch(peer, msg)
        except ProtocolError as exc:
            self._error(peer, exc)
        except Exception as exc:  # a bug must not take the daemon down for everyone
            log.exception("internal_error", peer=peer.hex())
            self._error(peer, ProtocolError(E.INTERNAL, f"internal error: {type(exc).__name__}"))

    def send(self, peer: bytes, msg: dict[str, Any]) -> None:
        try:
            self.sock.send_multipart([peer, encode(msg)], flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # peer gone (ROUTER_MANDATORY) or its queue is full
            log.warning("send_failed", peer=peer.hex(), type=msg.get("t"), error=str(exc))

    def _error(self, peer: bytes, exc: ProtocolError) -> None:
        self.errors[exc.code] = self.errors.get(exc.code, 0) + 1
        reply: dict[str, Any] = {"t": T.ERROR, "code": exc.code, "message": exc.message}
        if exc.ref is not None:
            reply["re"] = exc.ref
        self.send(peer, reply)

    # --- dispatch ------------------------------------------------------------------------------------
    async def _dispatch(self, peer: bytes, msg: dict[str, Any]) -> None:
        t = msg["t"]
        ref = msg.get("id") if isinstance(msg.get("id"), int) else None
        if t == T.HELLO:
            self._hello(peer, msg, ref)
            return
        if t == T.STATUS:
            self._status(peer, ref)
            return
        if t == T.HEARTBEAT:
            self._touch(peer)
            self.send(peer, {"t": T.HEARTBEAT, "re": ref} if ref is not None else {"t": T.HEARTBEAT})
            return
        handler = {
            T.SNAPSHOT: self._snapshot,
            T.DELTA: self._delta,
            T.ACK: self._ack,
            T.NACK: self._nack,
            T.RECALL: self._recall,
            T.BYE: self._bye,
        }.get(t)
        if handler is None:
            if t in (T.CHECKPOINT, T.RESTORE):
                raise ProtocolError(E.UNAVAILABLE, f"{t} is not available in this daemon yet", ref)
            raise ProtocolError(E.UNKNOWN_TYPE, f"unknown message type {t!r}", ref)
        state = self.by_peer.get(peer)
        if state is None:
            raise ProtocolError(E.NOT_ATTACHED, f"{t} before HELLO: send HELLO first", ref)
        state.last_seen = time.monotonic()
        handler(state, msg, ref)

    def _touch(self, peer: bytes) -> None:
        if (state := self.by_peer.get(peer)) is not None:
            state.last_seen = time.monotonic()

    def _hello(self, peer: bytes, msg: dict[str, Any], ref: int | None) -> None:
        hello = parse_hello(msg)
        try:
            eff = resolve_agent(
                self.cfg,
                hello.agent,
                requested_budget=hello.budget,
                requested_reserve=hello.reserve,
                requested_policy=hello.policy,
            )
        except ValueError as exc:
            raise ProtocolError(E.INVALID, f"HELLO: {exc}", ref) from None
        budget, reserve, policy = eff.budget, eff.reserve, eff.policy
        marks = Watermarks(budget, reserve, eff.low_watermark)
        old = self.agents.get(hello.agent)
        if old is not None:
            self.by_peer.pop(old.peer, None)
        state = AgentState(hello.agent, hello.session, peer, marks, policy)
        if old is not None and old.session == hello.session:
            state.archive = old.archive  # the same agent reconnecting keeps its archive
        self.agents[hello.agent] = state
        self.by_peer[peer] = state
        log.info("agent_attached", agent=hello.agent, session=hello.session, budget=budget, reserve=reserve)
        self.send(
            peer,
            {
                "t": T.WELCOME,
                "re": ref,
                "version": PROTOCOL_VERSION,
                "agent": hello.agent,
                "session": hello.session,
                "budget": budget,
                "reserve": reserve,
                "policy": policy,
                "high_watermark": marks.high,
                "low_watermark": marks.low,
                "context_version": state.ctx.version,
                "max_frame": self.max_frame,
                "heartbeat_s": self.cfg.daemon.heartbeat_s,
            },
        )
        self.on_change()

    def _snapshot(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        version = field(msg, "version", int, check=lambda v: v >= 0, what="a non-negative int")
        sections = self._counted(sections_field(msg, "sections", self.max_frame))
        try:
            state.ctx.reset(sections, version)
        except ContextError as exc:
            raise ProtocolError(E.INVALID, f"SNAPSHOT: {exc}", ref) from None
        state.synced = True
        state.pending.clear()  # proposals computed against the old mirror are void
        self._synced(state, ref)

    def _delta(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        base = field(msg, "base", int, what="an int")
        version = field(msg, "version", int, default=base + 1, what="an int")
        ops = parse_ops(msg, self.max_frame)
        if not state.synced:
            return  # waiting for the SNAPSHOT we asked for; deltas until then are moot
        if base != state.ctx.version or version != base + 1:
            self._resync(state, f"delta {base}->{version} does not follow mirror version {state.ctx.version}")
            return
        ops = [type(op)(op.op, tuple(self._counted(op.sections)), op.ids) for op in ops]
        try:
            state.ctx.apply_ops(ops, version)
        except ContextError as exc:
            self._resync(state, str(exc))
            return
        self._synced(state, ref)

    def _ack(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        pid = field(msg, "proposal", str, check=name_ok)
        version = field(msg, "version", int)
        pending = state.pending.pop(pid, None)
        if pending is None:
            raise ProtocolError(E.UNKNOWN_PROPOSAL, f"ACK: no pending proposal {pid!r}", ref)
        if version != state.ctx.version + 1:
            self._resync(
                state, f"ACK at version {version} does not follow mirror version {state.ctx.version}"
            )
            return
        try:
            state.ctx.apply_proposal(pending.proposal, version)
        except ContextError as exc:
            self._resync(state, f"ACK of {pid}: {exc}")
            return
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
        if state.pending.pop(pid, None) is None:
            raise ProtocolError(E.UNKNOWN_PROPOSAL, f"NACK: no pending proposal {pid!r}", ref)
        state.nacks += 1
        log.info("proposal_rejected", agent=state.agent, proposal=pid, reason=reason)
        self._maybe_compact(state)

    def _recall(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        refs = ids_field(msg, "refs")
        items = []
        for r in refs:
            originals = state.archive.get(r)
            if originals is None:
                raise ProtocolError(E.NOT_FOUND, f"RECALL: no archive entry {r!r} for this agent", ref)
            items.append({"ref": r, "sections": [s.to_wire() for s in originals]})
        self.send(state.peer, {"t": T.RECALLED, "re": ref, "items": items})

    def _bye(self, state: AgentState, msg: dict[str, Any], ref: int | None) -> None:
        self.by_peer.pop(state.peer, None)
        self.agents.pop(state.agent, None)
        log.info("agent_detached", agent=state.agent)
        self.send(state.peer, {"t": T.BYE, "re": ref})
        self.on_change()

    def _status(self, peer: bytes, ref: int | None) -> None:
        state = self.by_peer.get(peer)
        agents = [state] if state is not None else list(self.agents.values())
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
            "frames": self.frames,
            "errors": dict(self.errors),
            "degraded": self.summarizer.degraded,
            "degraded_reason": self.summarizer.degraded_reason,
            "model": self.cfg.model.path,
        }

    # --- sync & compaction ---------------------------------------------------------------------------
    def _counted(self, sections: Sequence[Section]) -> list[Section]:
        return [s if s.tokens else s.with_tokens(self.summarizer.count(s.text)) for s in sections]

    def _synced(self, state: AgentState, ref: int | None) -> None:
        if ref is not None:
            self.send(
                state.peer,
                {"t": T.SYNCED, "re": ref, "version": state.ctx.version, "tokens": state.ctx.tokens},
            )
        self._maybe_compact(state)

    def _resync(self, state: AgentState, reason: str) -> None:
        state.synced = False
        state.pending.clear()
        log.info("resync_requested", agent=state.agent, reason=reason)
        self.send(state.peer, {"t": T.RESYNC, "reason": reason, "version": state.ctx.version})

    def _maybe_compact(self, state: AgentState) -> None:
        if state.policy != "auto" or state.job_running or state.pending or not state.synced:
            return
        if state.ctx.tokens < state.marks.high:
            state.stuck_reported = False
            state.stuck_tokens = 0
            return
        if state.stuck_tokens and state.ctx.tokens < state.stuck_tokens + state.marks.budget // 50:
            return  # nothing foldable was left; wait until the context has grown before trying again
        p = plan(list(state.ctx), state.marks, self.cfg.compaction.fresh_turns)
        if p is None:
            self._stuck(state, "only anchors and small regions are left")
            return
        state.job_running = True
        task = asyncio.create_task(self._compact(state, p), name=f"compact-{state.agent}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

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

    async def _compact(self, state: AgentState, p: Any) -> None:
        try:
            pending = await build_proposal(state, p, self.summarizer)
        except Exception:
            log.exception("compaction_failed", agent=state.agent)
            pending = None
        finally:
            state.job_running = False
        if self.agents.get(state.agent) is not state:
            return
        if pending is None:
            self._stuck(state, "the digest would not be smaller than its region")
            return
        reason = state.ctx.stale_reason(pending.proposal)
        if reason:  # the mirror moved under the job: plan again on the next change
            log.info("proposal_dropped", agent=state.agent, reason=reason)
            self._maybe_compact(state)
            return
        state.pending[pending.proposal.proposal] = pending
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

    def expire(self, timeout_s: float) -> None:
        now = time.monotonic()
        for agent, state in list(self.agents.items()):
            if now - state.last_seen > timeout_s:
                log.info("agent_expired", agent=agent, silent_s=round(now - state.last_seen, 1))
                self.agents.pop(agent, None)
                self.by_peer.pop(state.peer, None)

    async def drain(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
