"""An attached agent's requests that read or replace its context as a whole: RECALL (originals
from the archive), CHECKPOINT (save, list, drop), RESTORE (a saved context becomes the mirror);
and STATUS (counters; an agent sees itself only)."""

from __future__ import annotations

from typing import Any

from ipc.protocol import T, field, name_ok, parse_checkpoint, parse_recall, parse_restore
from watcher.observe import logs
from watcher.serve import limits
from watcher.serve.checkpoints import checkpoint as checkpoint_op
from watcher.serve.checkpoints import restore as restore_op
from watcher.serve.hub import Hub
from watcher.serve.jobs import Jobs
from watcher.serve.recall import check_claim
from watcher.serve.recall import recall as recall_op
from watcher.serve.session import Session

log = logs.get("compactd.server")


class Requests:
    def __init__(self, hub: Hub, jobs: Jobs) -> None:
        self.hub = hub
        self.jobs = jobs

    def recall(self, state: Session, msg: dict[str, Any], ref: int | None) -> None:
        """Originals by archive ref, section or digest id, or a text search; own scope only."""
        hub = self.hub
        hub.send(state.peer, recall_op(hub.store, state.agent, parse_recall(msg), ref, hub.max_frame))

    def checkpoint(self, state: Session, msg: dict[str, Any], ref: int | None) -> None:
        hub = self.hub
        hub.send(state.peer, checkpoint_op(hub.store, state, parse_checkpoint(msg), ref, hub.max_frame))

    def restore(self, state: Session, msg: dict[str, Any], ref: int | None) -> None:
        hub = self.hub
        req = parse_restore(msg)
        reply = restore_op(hub.store, state, req, ref, hub.max_frame, hub.summarizer.count)
        hub.meter.set(state, limits.mirror_bytes(state.ctx))  # (it was this agent's mirror once)
        hub.packer.note(state, state.ctx)
        log.info(
            "checkpoint_restored",
            agent=state.agent,
            checkpoint=req.name,
            version=reply["version"],
            forced=reply["forced"],
            expected_tokens=reply["expected_tokens"],
            actual_tokens=reply["actual_tokens"],
        )
        hub.send(state.peer, reply)
        self.jobs.maybe_compact(state)


def status(hub: Hub, peer: bytes, ref: int | None, msg: dict[str, Any] | None = None) -> None:
    state = hub.by_peer.get(peer)
    claimed = field(msg, "agent", str, default=None, check=name_ok) if msg is not None else None
    if state is not None:  # an agent sees itself only
        check_claim(claimed, state.agent, "STATUS", ref)
        agents = [state]
    else:  # the operator's view (compactd status): counters of every agent, no content
        agents = [a for a in hub.agents.values() if claimed is None or a.agent == claimed]
    hub.send(
        peer,
        {
            "t": T.STATE,
            "re": ref,
            "daemon": hub.daemon_status(),
            "agents": [a.snapshot() for a in agents],
        },
    )
