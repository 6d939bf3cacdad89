"""A proposal's life in the store, as the server sees it: recorded (planned -> sent) before it
leaves, settled (acked, nacked) when the agent answers, reconciled with the mirror after a
SNAPSHOT (watcher.serve.recovery), forgotten when it will never be sent."""

from __future__ import annotations

import contextlib
import sqlite3

from watcher.observe import logs
from watcher.serve.compactor import forget
from watcher.serve.hub import Hub
from watcher.serve.recovery import Reconciled, reconcile
from watcher.serve.session import Pending, Session
from watcher.store.crashpoints import crashpoint
from watcher.store.store import StoreError, TransitionError

log = logs.get("compactd.server")


def record(hub: Hub, state: Session, pending: Pending) -> bool:
    """planned → sent, committed before the proposal leaves (its originals already are)."""
    p = pending.proposal
    try:
        hub.store.proposals.record(state.agent, state.session, p, pending.method)
        crashpoint("planned")
        hub.store.proposals.transition(state.agent, p.proposal, "sent")
    except (StoreError, sqlite3.Error):
        log.exception("store_failed", agent=state.agent, proposal=p.proposal)
        with contextlib.suppress(StoreError, sqlite3.Error):
            hub.store.proposals.transition(state.agent, p.proposal, "expired", reason="store failure")
        abandon(state, pending)
        return False
    return True


def abandon(state: Session, pending: Pending) -> None:
    """A built proposal that will not be sent: its archive entry goes (nothing refers to it)."""
    for ref in pending.proposal.archive:
        forget(state, ref)


def settled(
    hub: Hub, state: Session, pid: str, to: str, *, reason: str = "", version: int | None = None
) -> None:
    """The agent answered: sent -> ``to`` (acked at ``version``, or nacked for ``reason``)."""
    try:
        hub.store.proposals.transition(state.agent, pid, to, reason=reason, version=version)
    except TransitionError as exc:  # aged out meanwhile: the agent's context still decides
        log.warning("proposal_transition_refused", agent=state.agent, proposal=pid, error=str(exc))


def settle(hub: Hub, state: Session) -> Reconciled:
    """After a SNAPSHOT: the store's open proposals of the session against the new mirror."""
    out = reconcile(hub.store, state)
    for p in out.acked:  # applied, but the ACK was lost (e.g. with a killed daemon)
        state.count_applied(p)
    if out.acked or out.reoffered or out.expired:
        log.info(
            "proposals_settled",
            agent=state.agent,
            acked=[p.proposal for p in out.acked],
            reoffered=[p.proposal.proposal for p in out.reoffered],
            expired=out.expired,
        )
    return out
