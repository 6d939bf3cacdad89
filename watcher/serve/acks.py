"""The agent's answer to a proposal: ACK (applied at a version: the mirror applies it too) or NACK
(stale, rejected, failed: the next change may plan again)."""

from __future__ import annotations

from typing import Any

from ipc.context import ContextError
from ipc.protocol import MAX_DETAIL_LEN, E, ProtocolError, field, name_ok
from watcher.observe import logs
from watcher.serve import limits, records
from watcher.serve.hub import Hub
from watcher.serve.jobs import Jobs
from watcher.serve.session import Session
from watcher.serve.sync import Sync
from watcher.store.crashpoints import crashpoint

log = logs.get("compactd.server")


class Acks:
    def __init__(self, hub: Hub, sync: Sync, jobs: Jobs) -> None:
        self.hub = hub
        self.sync = sync
        self.jobs = jobs

    def ack(self, state: Session, msg: dict[str, Any], ref: int | None) -> None:
        pid = field(msg, "proposal", str, check=name_ok)
        version = field(msg, "version", int)
        pending = state.pending.pop(pid, None)
        if pending is None:
            raise ProtocolError(E.UNKNOWN_PROPOSAL, f"ACK: no pending proposal {pid!r}", ref)
        crashpoint("ack")  # a kill here: the SNAPSHOT after the restart settles it (watcher.serve.recovery)
        if version != state.ctx.version + 1:
            self.sync.resync(
                state, f"ACK at version {version} does not follow mirror version {state.ctx.version}", ref
            )
            return
        try:
            state.ctx.apply_proposal(pending.proposal, version)
        except ContextError as exc:
            self.sync.resync(state, f"ACK of {pid}: {exc}", ref)
            return
        self.hub.meter.set(state, limits.mirror_bytes(state.ctx))
        self.hub.packer.note(state, pending.proposal.digest)  # long digests are held packed too
        records.settled(self.hub, state, pid, "acked", version=version)
        p = pending.proposal
        state.count_applied(p)
        log.info(
            "proposal_applied",
            agent=state.agent,
            proposal=pid,
            saved=p.tokens_before - p.tokens_after,
            usage=round(state.usage, 3),
        )
        self.hub.emit(
            "proposal_applied",
            state.agent,
            proposal=pid,
            saved=p.tokens_before - p.tokens_after,
            invalidated_prefix_tokens=p.invalidated_prefix_tokens,
            tokens=state.ctx.tokens,
            usage=round(state.usage, 4),
        )
        self.sync.synced(state, ref)

    def nack(self, state: Session, msg: dict[str, Any], ref: int | None) -> None:
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
            if self.hub.store.proposals.state_of(state.agent, pid) in ("acked", "nacked", "expired"):
                return  # a second copy of a re-offered proposal, already settled
            raise ProtocolError(E.UNKNOWN_PROPOSAL, f"NACK: no pending proposal {pid!r}", ref)
        records.settled(self.hub, state, pid, "nacked", reason=f"{reason}: {detail}" if detail else reason)
        state.nacks += 1
        log.info("proposal_rejected", agent=state.agent, proposal=pid, reason=reason, detail=detail)
        self.hub.emit("proposal_rejected", state.agent, proposal=pid, reason=reason)
        self.jobs.maybe_compact(state)
