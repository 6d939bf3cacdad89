"""What the request handlers see of the server (watcher.serve.server.Server): the shared state
and the ways out (replies, events). The handlers (sync, acks, jobs, attach, requests, status,
housekeeping) each take a :class:`Hub`; only the server is one, so they import nothing of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from summarizer.digest import Summarizer
from watcher.config.settings import Config
from watcher.planning.policies import Policy
from watcher.serve import limits
from watcher.serve.auth import PeerInfo
from watcher.serve.packer import Packer
from watcher.serve.scheduler import FairScheduler
from watcher.serve.session import Session
from watcher.store.store import Store

# Observers of what happens (metrics, MQTT events): listener(kind, agent or None, fields).
# Kinds: proposal_sent/applied/rejected/dropped, digest, headroom_alert/ok, degraded, recovered,
# agent_degraded, agent_recovered.
Listener = Callable[[str, str | None, dict[str, Any]], None]

# A request of an attached agent: handler(session, message, its ref).
Route = Callable[[Session, dict[str, Any], int | None], None]


class Reader(Protocol):
    """What the jobs see of the model's reading ahead (watcher.serve.readahead.ReadAhead)."""

    def preempt(self) -> None:
        """Stop the read in progress: a job needs the engine."""

    def used(self, sections: int, shown: bool) -> None:
        """A digest ranked ``sections`` sections from their reads (``shown``: it is the model's)."""


class Hub(Protocol):
    cfg: Config
    summarizer: Summarizer
    store: Store
    peer_info: PeerInfo  # what the transport proves about peers (watcher.serve.auth)
    policies: Callable[[str], Policy]  # a planner's name -> its policy (watcher.planning.policies)
    max_frame: int
    agents: dict[str, Session]
    by_peer: dict[bytes, Session]
    meter: limits.Meter  # bytes all mirrors hold (watcher.serve.limits)
    scheduler: FairScheduler
    packer: Packer  # long texts of the mirrors held deflated (watcher.serve.packer)

    @property
    def read_ahead(self) -> Reader:
        """The model ranking lines before their digests (watcher.serve.readahead)."""
        ...

    def send(self, peer: bytes, msg: dict[str, Any], *, quiet: bool = False) -> None: ...

    def send_frame(self, peer: bytes, frame: bytes, t: object, *, quiet: bool = False) -> None: ...

    def emit(self, kind: str, agent: str | None, **fields: Any) -> None: ...

    def check_degraded(self) -> None: ...

    def daemon_status(self) -> dict[str, Any]: ...
