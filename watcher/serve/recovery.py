"""Settle an agent's open proposals against the context it just sent (SNAPSHOT).

After a daemon restart (kill -9 included) or any resync, the daemon does not know which of the
proposals it sent were applied: the ACK may have died with the old process, or the PROPOSAL may
never have left it (the crash came between "marked sent" and the socket). The agent's context
answers it, for each ``sent`` proposal of this agent and session:

* its digest sections are in the context and the sections it replaced are gone → it was applied:
  **acked** (the ACK was lost);
* the sections it replaces are all there, contiguous and unchanged (text and attributes equal the
  archived originals), and its digest is not → still applicable: **re-offered**, same id and
  digest, with the snapshot's version as its new base;
* anything else → **expired** (it can never apply; the archived originals stay recallable).

A proposal is therefore never half-applied: the store's state always ends up agreeing with the
agent's context.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

from ipc.context import Context
from ipc.protocol import Proposal
from ipc.sections import Section
from watcher.config.settings import StoreConfig
from watcher.observe import logs
from watcher.serve.session import Pending, Session
from watcher.store.store import DB_NAME, Store, StoredProposal, TransitionError

log = logs.get("compactd.store")


@dataclass
class Reconciled:
    acked: list[Proposal] = field(default_factory=list)
    reoffered: list[Pending] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)


def same(a: Section, b: Section) -> bool:
    """Equal as the agent sees it; token counts aside (the daemon may have counted them)."""
    return (a.id, a.kind, a.text, a.role, a.priority, a.pinned, a.group, a.ts, a.meta) == (
        b.id,
        b.kind,
        b.text,
        b.role,
        b.priority,
        b.pinned,
        b.group,
        b.ts,
        b.meta,
    )


def _run(ctx: Context, ids: tuple[str, ...]) -> list[Section] | None:
    """The sections ``ids`` if they are all in ``ctx``, contiguous and in this order."""
    if not ids or ids[0] not in ctx:
        return None
    start = ctx.index(ids[0])
    order = ctx.ids()[start : start + len(ids)]
    if order != list(ids):
        return None
    return [s for i in ids if (s := ctx.get(i)) is not None]


def applied(ctx: Context, p: Proposal) -> bool:
    new_ids = tuple(s.id for s in p.digest)
    run = _run(ctx, new_ids)
    if run is None or not all(same(a, b) for a, b in zip(run, p.digest, strict=True)):
        return False
    gone = set(p.replaces) - set(new_ids)
    return not any(i in ctx for i in gone)


def applicable(ctx: Context, p: Proposal, originals: dict[str, Section]) -> bool:
    """The replaced run is intact: archived sections unchanged, passed-through ones as in the digest."""
    run = _run(ctx, p.replaces)
    if run is None:
        return False
    passed = {s.id: s for s in p.digest}
    for sec in run:
        want = originals.get(sec.id) or passed.get(sec.id)
        if want is None or not same(sec, want):
            return False
    replaced = set(p.replaces)
    return not any(s.id in ctx and s.id not in replaced for s in p.digest)


def reconcile(store: Store, state: Session) -> Reconciled:
    """Settle ``state``'s open proposals (of its session) against ``state.ctx``; fills
    ``state.pending`` with the re-offered ones (the caller sends them)."""
    out = Reconciled()
    ctx = state.ctx
    for sp in store.proposals.open(state.agent, state.session):
        p = sp.proposal
        try:
            if applied(ctx, p):
                store.proposals.transition(state.agent, p.proposal, "acked", version=ctx.version)
                out.acked.append(p)
                continue
            originals = _originals(store, state.agent, sp)
            if applicable(ctx, p, originals):
                again = dataclasses.replace(p, base=ctx.version)
                if not ctx.stale_reason(again):
                    store.proposals.reoffer(state.agent, again)
                    pending = Pending(again, tuple(originals.values()), sp.method)
                    state.pending[p.proposal] = pending
                    out.reoffered.append(pending)
                    continue
            store.proposals.transition(
                state.agent, p.proposal, "expired", reason="no longer applies after a resync"
            )
            out.expired.append(p.proposal)
        except TransitionError:
            continue  # settled meanwhile (e.g. aged out); nothing to do
    return out


def _originals(store: Store, agent: str, sp: StoredProposal) -> dict[str, Section]:
    return {r.section.id: r.section for r in store.archive.originals(agent, sp.ref)} if sp.ref else {}


def open_store(state_dir: Path, cfg: StoreConfig) -> Store:
    """Open the daemon's store at start: PRAGMA integrity_check (refuses a damaged file), schema
    migration, then boot recovery (watcher.store.store.Store.recover). StoreError if unusable."""
    path = state_dir / DB_NAME
    t0 = time.monotonic()
    store = Store.open(
        path,
        synchronous=cfg.synchronous,
        retention_days=cfg.retention_days,
        max_archive_mb=cfg.max_archive_mb,
    )
    checked = time.monotonic() - t0
    boot = store.recover()
    log.info(
        "store_opened",
        path=str(path),
        schema=store.schema_version,
        integrity="ok",
        integrity_check_s=round(checked, 3),
        synchronous=cfg.synchronous,
        archived_bytes=store.retention.archived_bytes,
        expired_planned=boot.expired_planned,
        orphan_archives=boot.orphan_archives,
        open_sent=boot.open_sent,
    )
    return store
