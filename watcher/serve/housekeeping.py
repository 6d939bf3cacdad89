"""What the server does besides answering frames: age out silent agents and open proposals,
apply [store] retention, notice the summarizer's degraded state, say goodbye, and keep Python's
full garbage collections (and long GIL holds) off the ingest path."""

from __future__ import annotations

import asyncio
import gc
import sys
import time

from ipc.protocol import T
from watcher.observe import logs
from watcher.serve.hub import Hub

log = logs.get("compactd.server")

RETENTION_EVERY_S = 600.0  # how often housekeeping applies [store] retention
GC_FREEZE_EVERY_S = 1.0  # see gc_pacer
GC_FULL_EVERY_S = 300.0
# How long a thread (a plan, archive rows: CPU-bound Python) may hold the GIL while the serving loop
# waits for it; Python's default is 5 ms. Set while the server runs.
SWITCH_INTERVAL_S = 0.001


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
            await asyncio.sleep(freeze_every_s)  # a pacing timer, not a wait for a state
            if time.monotonic() - last_full >= full_every_s:
                gc.unfreeze()
                gc.collect()
                last_full = time.monotonic()
            gc.freeze()
    finally:
        gc.unfreeze()


class Switch:
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


class Housekeeping:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self._retention_at = 0.0
        self._degraded_seen = hub.summarizer.degraded

    def store(self, now: float | None = None) -> None:
        """Age out open proposals of agents that did not come back; apply [store] retention."""
        hub = self.hub
        now = time.time() if now is None else now
        cutoff = now - hub.cfg.daemon.agent_timeout_s
        for agent in hub.store.proposals.agents_with_open():
            if agent not in hub.agents:
                n = hub.store.proposals.expire_open(
                    agent, older_than=cutoff, reason="its agent did not come back"
                )
                if n:
                    log.info("proposals_expired", agent=agent, count=n)
        if now - self._retention_at >= RETENTION_EVERY_S:
            self._retention_at = now
            hub.store.retention.days = hub.cfg.store.retention_days
            hub.store.retention.max_archive_mb = hub.cfg.store.max_archive_mb
            ev = hub.store.retention.enforce(now)
            if ev.by_age or ev.by_size:
                log.info("archive_evicted", by_age=ev.by_age, by_size=ev.by_size, bytes=ev.bytes)

    def check_degraded(self) -> None:
        """Emit degraded/recovered when the summarizer's state changes."""
        summarizer = self.hub.summarizer
        now = summarizer.degraded
        if now != self._degraded_seen:
            self._degraded_seen = now
            if now:
                log.warning("degraded", reason=summarizer.degraded_reason)
                self.hub.emit("degraded", None, reason=summarizer.degraded_reason)
            else:
                log.info("recovered")
                self.hub.emit("recovered", None)

    def expire(self, timeout_s: float) -> None:
        hub = self.hub
        now = time.monotonic()
        for agent, state in list(hub.agents.items()):
            if now - state.last_seen > timeout_s:
                log.info("agent_expired", agent=agent, silent_s=round(now - state.last_seen, 1))
                hub.agents.pop(agent, None)
                hub.by_peer.pop(state.peer, None)
                # if it is still there after all, it learns why its next request says not_attached
                hub.send(state.peer, {"t": T.BYE, "reason": "expired"}, quiet=True)

    def farewell(self, reason: str = "shutdown") -> None:
        """Tell every attached agent the daemon is going away (before the socket closes)."""
        for state in list(self.hub.agents.values()):
            self.hub.send(state.peer, {"t": T.BYE, "reason": reason}, quiet=True)
