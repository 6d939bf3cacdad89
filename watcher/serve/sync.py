"""Keeping a session's mirror in step with its agent: SNAPSHOT (in parts), DELTA, SYNCED replies,
RESYNC requests, and the size limits checked before anything is applied."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ipc.context import ContextError
from ipc.protocol import MAX_SNAPSHOT_SECTIONS, E, Op, ProtocolError, T, parse_delta, parse_snapshot
from ipc.sections import Section
from watcher.observe import logs
from watcher.serve import limits, records, wire
from watcher.serve.hub import Hub
from watcher.serve.jobs import Jobs
from watcher.serve.session import Session, StagedSnapshot

log = logs.get("compactd.server")

RESYNC_REPEAT_S = 2.0  # while unsynced, a DELTA without id repeats the RESYNC at most this often


class Sync:
    def __init__(self, hub: Hub, jobs: Jobs) -> None:
        self.hub = hub
        self.jobs = jobs

    def snapshot(self, state: Session, msg: dict[str, Any], ref: int | None) -> None:
        hub = self.hub
        snap = parse_snapshot(msg, hub.max_frame)
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
        hub.meter.set(state, nbytes)
        hub.packer.note(state, sections)
        state.synced = True
        state.pending.clear()  # proposals computed against the old mirror are void...
        # ...unless the store says they are still open (watcher.serve.recovery)
        settled = records.settle(hub, state)
        self.synced(state, ref)
        if settled.reoffered:
            hub.store.sync_wal()  # durable before they leave again (rare: after a restart)
        for pending in settled.reoffered:
            hub.send(state.peer, pending.proposal.to_wire())

    def delta(self, state: Session, msg: dict[str, Any], ref: int | None) -> None:
        base, version, ops = parse_delta(msg, self.hub.max_frame)
        self.apply_delta(state, base, version, ops, ref)

    def apply_delta(self, state: Session, base: int, version: int, ops: list[Op], ref: int | None) -> None:
        """A valid DELTA (parsed by :meth:`delta`, or by watcher.serve.wire on the fast path)."""
        state.staged = None  # a DELTA in the middle of a multi-part SNAPSHOT voids it
        if not state.synced:  # waiting for the SNAPSHOT we asked for: deltas until then are moot
            if ref is not None or time.monotonic() - state.resync_at >= RESYNC_REPEAT_S:
                self.resync(state, "a SNAPSHOT is needed first (RESYNC pending)", ref)
            return
        if base != state.ctx.version or version != base + 1:
            self.resync(
                state, f"delta {base}->{version} does not follow mirror version {state.ctx.version}", ref
            )
            return
        hub = self.hub
        total = hub.meter.total(hub.agents.values())
        nbytes = limits.check_delta(hub.cfg.daemon, state, ops, total, ref)
        for op in ops:
            if op.sections and not all(s.tokens for s in op.sections):
                ops = [type(o)(o.op, tuple(self._counted(o.sections)), o.ids) for o in ops]
                break
        try:
            state.ctx.apply_ops(ops, version)
        except ContextError as exc:
            self.resync(state, str(exc), ref)
            return
        hub.meter.set(state, nbytes)
        for op in ops:
            if op.sections:
                hub.packer.note(state, op.sections)
        self.synced(state, ref)

    def synced(self, state: Session, ref: int | None) -> None:
        """The mirror moved: answer SYNCED (if the request has an id) and see whether to compact."""
        if ref is not None:  # encode({"t": SYNCED, "re": ref, "version": ..., "tokens": ...})
            frame = wire.synced(ref, state.ctx.version, state.ctx.tokens)
            self.hub.send_frame(state.peer, frame, T.SYNCED)
        self.jobs.maybe_compact(state)
        self.jobs.headroom(state)

    def resync(self, state: Session, reason: str, ref: int | None = None) -> None:
        """Ask for a SNAPSHOT; ``re`` names the request that found the gap (it is answered by the
        SYNCED of the SNAPSHOT that the client sends with that same id)."""
        state.synced = False
        state.pending.clear()
        state.resync_at = time.monotonic()
        log.info("resync_requested", agent=state.agent, reason=reason)
        reply: dict[str, Any] = {"t": T.RESYNC, "reason": reason, "version": state.ctx.version}
        if ref is not None:
            reply["re"] = ref
        self.hub.send(state.peer, reply)

    def _check_size(self, what: str, state: Session, sections: int, nbytes: int, ref: int | None) -> None:
        others = self.hub.meter.total(self.hub.agents.values()) - limits.held_bytes(state)
        limits.check_size(self.hub.cfg.daemon, what, state.agent, sections, nbytes, others, ref)

    def _counted(self, sections: Sequence[Section]) -> list[Section]:
        count = self.hub.summarizer.count
        return [s if s.tokens else s.with_tokens(count(s.text)) for s in sections]
