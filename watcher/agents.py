"""Per-agent state in the daemon: the mirror of its context, its proposals and its archive."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ipc.context import Context
from ipc.protocol import Proposal
from ipc.sections import Section
from watcher.planner import Watermarks


@dataclass
class Pending:
    proposal: Proposal
    originals: tuple[Section, ...]
    method: str
    created: float = field(default_factory=time.monotonic)


@dataclass
class AgentState:
    agent: str
    session: str
    peer: bytes
    marks: Watermarks
    policy: str = "auto"
    ctx: Context = field(default_factory=Context)
    synced: bool = True  # False after a RESYNC request, until the next SNAPSHOT
    pending: dict[str, Pending] = field(default_factory=dict)
    archive: dict[str, tuple[Section, ...]] = field(default_factory=dict)
    job_running: bool = False
    last_seen: float = field(default_factory=time.monotonic)
    stuck_reported: bool = False
    stuck_tokens: int = 0  # usage when compaction last found nothing to fold
    compactions: int = 0
    tokens_saved: int = 0
    nacks: int = 0
    invalidated_tokens: int = 0

    @property
    def usage(self) -> float:
        return self.ctx.tokens / self.marks.budget if self.marks.budget else 0.0

    def snapshot(self) -> dict[str, object]:
        return {
            "agent": self.agent,
            "session": self.session,
            "version": self.ctx.version,
            "sections": len(self.ctx),
            "tokens": self.ctx.tokens,
            "budget": self.marks.budget,
            "reserve": self.marks.reserve,
            "high_watermark": self.marks.high,
            "low_watermark": self.marks.low,
            "usage": round(self.usage, 4),
            "headroom": round(1.0 - self.usage, 4),
            "policy": self.policy,
            "pending_proposals": len(self.pending),
            "compacting": self.job_running,
            "compactions": self.compactions,
            "tokens_saved": self.tokens_saved,
            "nacks": self.nacks,
            "archived_sections": sum(len(v) for v in self.archive.values()),
            "synced": self.synced,
            "stuck": self.stuck_reported,
        }
