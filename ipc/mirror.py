"""The context part of AgentLink (ipc.client): ``link.context`` kept in step with the daemon's mirror.
Every change goes as an O(change) DELTA; a daemon that cannot keep up never blocks the agent (the
changes are coalesced into one SNAPSHOT, split into parts within ``max_frame``); proposals are
applied (ACK) or refused (NACK) here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any, Protocol

from ipc.context import Context
from ipc.protocol import MAX_DETAIL_LEN, E, Op, Proposal, T, encode
from ipc.sections import Section
from ipc.transport import LinkError, LinkTransport


class Target(Protocol):
    """Something a proposal is applied onto besides ``link.context`` (e.g. adapters.Transcript)."""

    def check(self, proposal: Proposal) -> str:
        """ "" if the proposal can be applied, else why not."""
        ...

    def apply(self, proposal: Proposal) -> None: ...


_ENVELOPE = 1024  # bytes kept free in a frame for the map around the sections


class LinkMirror(LinkTransport):
    """The agent's context, its DELTAs and SNAPSHOTs, and ACK/NACK of proposals."""

    # set by the constructor (ipc.session)
    context: Context
    proposals: asyncio.Queue[Proposal]
    resyncs: int
    coalesced: int  # changes sent as one SNAPSHOT because the daemon could not keep up
    _dirty: bool  # a change could not be sent: the next send is a SNAPSHOT

    async def snapshot(self, sections: Iterable[Section] | None = None) -> None:
        """Send the whole context (after attaching to a daemon that holds nothing for us).

        With ``sections``, they become the context first (at the next version). A context larger
        than one frame goes in several parts; the daemon's mirror changes when the last arrives."""
        if sections is not None:
            self.context.reset(sections, self.context.version + 1)
        await self._snapshot_request()

    async def _snapshot_request(self) -> None:
        rid = next(self._ids)
        await self._exchange(rid, self._snapshot_frames(rid), T.SNAPSHOT)

    def _snapshot_frames(self, rid: int | None) -> list[bytes]:
        """The context as SNAPSHOT frames, each within max_frame; ``rid`` goes on the last one."""
        version = self.context.version
        wires = [s.to_wire() for s in self.context]
        whole: dict[str, Any] = {"t": T.SNAPSHOT, "version": version, "sections": wires}
        if rid is not None:
            whole["id"] = rid
        frame = encode(whole)
        if len(frame) <= self.max_frame:
            return [frame]
        limit = self.max_frame - _ENVELOPE
        parts: list[list[dict[str, Any]]] = [[]]
        size = 0
        for w in wires:
            n = len(encode(w))
            if n > limit:
                raise LinkError(E.TOO_LARGE, f"section {w['id']!r} alone is {n} bytes; frames are {limit}")
            if parts[-1] and size + n > limit:
                parts.append([])
                size = 0
            parts[-1].append(w)
            size += n
        frames = []
        for i, chunk in enumerate(parts):
            msg: dict[str, Any] = {"t": T.SNAPSHOT, "version": version, "part": i, "sections": chunk}
            if i < len(parts) - 1:
                msg["more"] = True
            elif rid is not None:
                msg["id"] = rid
            frames.append(encode(msg))
        return frames

    def _flush(self) -> None:
        """Send the whole context in place of changes that could not be sent (latest wins)."""
        for frame in self._snapshot_frames(None):
            self._send_frame(frame)
        self._dirty = False

    async def append(self, *sections: Section, wait: bool = False) -> None:
        await self._delta([Op("append", tuple(sections))], wait)

    async def replace(self, *sections: Section, wait: bool = False) -> None:
        await self._delta([Op("replace", tuple(sections))], wait)

    async def remove(self, *ids: str, wait: bool = False) -> None:
        await self._delta([Op("remove", ids=tuple(ids))], wait)

    async def _delta(self, ops: list[Op], wait: bool) -> None:
        """Change the context and tell the daemon. Nothing changes if the frame would be too large
        or an op does not fit (ContextError); a daemon that cannot keep up never blocks the agent."""
        base = self.context.version
        msg = {"t": T.DELTA, "base": base, "version": base + 1, "ops": [_op_wire(op) for op in ops]}
        frame = self._encode(msg)
        self.context.apply_ops(ops, base + 1)
        if wait:
            if self._dirty:
                await self._snapshot_request()  # carries this change too
                self._dirty = False
            else:
                await self.request(msg)
            return
        try:
            if self._dirty:
                self._flush()
            else:
                self._send_frame(frame)
        except LinkError as exc:
            if exc.code != "backpressure":
                raise
            self._dirty = True  # the daemon's queue is full: coalesce into one SNAPSHOT later
            self.coalesced += 1

    async def apply(self, proposal: Proposal, onto: Target | None = None) -> bool:
        """Apply a proposal to the context (and ``onto``, e.g. an adapters.Transcript) and ACK it;
        NACK it as stale if its sections changed, or as rejected if ``onto`` cannot take it (a
        tool call would lose its result). True if applied."""
        reason = self.context.stale_reason(proposal)
        if reason:
            await self.reject(proposal, "stale", reason)
            return False
        if onto is not None and (why := onto.check(proposal)):
            await self.reject(proposal, "rejected", why)
            return False
        version = self.context.version + 1
        self.context.apply_proposal(proposal, version)
        if onto is not None:
            onto.apply(proposal)
        if self._dirty:  # the daemon is behind anyway: the SNAPSHOT voids the proposal there
            with contextlib.suppress(LinkError):
                self._flush()
        else:
            self._send({"t": T.ACK, "proposal": proposal.proposal, "version": version})
        return True

    async def reject(self, proposal: Proposal, reason: str = "rejected", detail: str = "") -> None:
        """NACK a proposal: ``reason`` is stale, rejected or failed."""
        msg: dict[str, Any] = {"t": T.NACK, "proposal": proposal.proposal, "reason": reason}
        if detail:
            msg["detail"] = detail[:MAX_DETAIL_LEN]
        self._send(msg)


def _op_wire(op: Op) -> dict[str, Any]:
    if op.op == "remove":
        return {"op": "remove", "ids": list(op.ids)}
    return {"op": op.op, "sections": [s.to_wire() for s in op.sections]}
