"""CHECKPOINT (save, list, show, drop) and RESTORE, with the guardrails of seed 000.

* **save** stores the daemon's mirror of the agent's context — identical to the agent's own, op
  for op — at version V, with the *side-effect epoch* the agent declares: a counter it bumps
  whenever it does something a context restore cannot undo (writes a file, runs a command, sends
  a message).
* **restore** refuses (``epoch_changed``) when the agent's epoch now differs from the saved one,
  unless ``force``: rewinding the context would make the agent forget effects that still exist.
  It resets the mirror to the checkpoint at a new version, expires open proposals (they were
  computed against the context being thrown away), and reports the expected tokens (recorded at
  save) against the actual tokens (the restored text recounted by today's tokenizer).
* Checkpoints belong to the agent identity and are visible from all its sessions; another agent's
  name is simply not found.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from ipc.protocol import CheckpointRequest, E, ProtocolError, RestoreRequest, T
from watcher.serve.recall import check_claim, page_bytes, sections_page
from watcher.serve.session import Session
from watcher.store.crashpoints import crashpoint
from watcher.store.store import Store, StoreError

DEFAULT_PAGE: Final = 1000


def checkpoint(
    store: Store, state: Session, req: CheckpointRequest, ref: int | None, max_frame: int
) -> dict[str, Any]:
    """The CHECKPOINTED reply for one CHECKPOINT op."""
    check_claim(req.agent, state.agent, "CHECKPOINT", ref)
    reply: dict[str, Any] = {"t": T.CHECKPOINTED, "re": ref, "op": req.op}
    if req.op == "save":
        if not state.synced:
            raise ProtocolError(
                E.VERSION_MISMATCH, "CHECKPOINT: the mirror is resyncing; send SNAPSHOT, then retry", ref
            )
        if req.version is not None and req.version != state.ctx.version:
            raise ProtocolError(
                E.VERSION_MISMATCH,
                f"CHECKPOINT: version {req.version} is not the mirror's version {state.ctx.version}",
                ref,
            )
        name = req.name or f"v{state.ctx.version}-{int(time.time())}"
        crashpoint("checkpoint")
        try:
            meta = store.checkpoints.save(
                state.agent,
                state.session,
                name,
                list(state.ctx),
                version=state.ctx.version,
                epoch=req.epoch,
                note=req.note,
                overwrite=req.overwrite,
            )
        except StoreError as exc:
            raise ProtocolError(E.INVALID, f"CHECKPOINT: {exc}", ref) from None
        reply["checkpoint"] = meta.to_wire()
    elif req.op == "list":
        reply["checkpoints"] = [m.to_wire() for m in store.checkpoints.saved(state.agent)]
    elif req.op == "show":
        found = store.checkpoints.get(state.agent, req.name)
        if found is None:
            raise _not_found(req.name, ref)
        meta, sections = found
        reply["checkpoint"] = meta.to_wire()
        if req.sections:
            wires = [s.to_wire() for s in sections]
            page, taken = sections_page(
                wires, req.offset, req.limit or DEFAULT_PAGE, page_bytes(0, max_frame)
            )
            reply["sections"] = page
            reply["total"] = len(wires)
            if req.offset + taken < len(wires):
                reply["next_offset"] = req.offset + taken
    else:  # drop
        if not store.checkpoints.drop(state.agent, req.name):
            raise _not_found(req.name, ref)
        reply["dropped"] = req.name
    return reply


def restore(
    store: Store,
    state: Session,
    req: RestoreRequest,
    ref: int | None,
    max_frame: int,
    count: Callable[[str], int],
) -> dict[str, Any]:
    """Reset the mirror to checkpoint ``req.name``; the RESTORED reply (with the first page of the
    sections; the client pages the rest with CHECKPOINT show)."""
    check_claim(req.agent, state.agent, "RESTORE", ref)
    found = store.checkpoints.get(state.agent, req.name)
    if found is None:
        raise _not_found(req.name, ref)
    meta, sections = found
    if meta.epoch != req.epoch and not req.force:
        raise ProtocolError(
            E.EPOCH_CHANGED,
            f"RESTORE {req.name!r}: the side-effect epoch changed since the checkpoint (saved at "
            f"{meta.epoch}, now {req.epoch}); effects outside the context would not be undone. "
            "Restore with force to do it anyway",
            ref,
        )
    expired = store.proposals.expire_open(state.agent, reason=f"restored checkpoint {req.name}")
    state.pending.clear()
    version = max(state.ctx.version, req.version or 0) + 1
    state.ctx.reset(sections, version)
    state.synced = True
    state.stuck_reported = False
    state.stuck_tokens = 0
    actual = sum(count(s.text) for s in sections)
    wires = [s.to_wire() for s in sections]
    page, taken = sections_page(wires, 0, DEFAULT_PAGE, page_bytes(0, max_frame))
    reply: dict[str, Any] = {
        "t": T.RESTORED,
        "re": ref,
        "name": meta.name,
        "version": version,
        "checkpoint_version": meta.version,
        "epoch_saved": meta.epoch,
        "epoch_now": req.epoch,
        "forced": meta.epoch != req.epoch,
        "expected_tokens": meta.tokens,
        "actual_tokens": actual,
        "token_mismatch": actual != meta.tokens,
        "expired_proposals": expired,
        "total": len(wires),
        "sections": page,
    }
    if taken < len(wires):
        reply["next_offset"] = taken
    return reply


def _not_found(name: str, ref: int | None) -> ProtocolError:
    return ProtocolError(E.NOT_FOUND, f"no checkpoint {name!r} for this agent", ref)
