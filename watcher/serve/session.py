"""One session per attached agent: its mirror, its policy, its pending proposals, its job.

The server (watcher.serve.server) routes each frame to the agent's session; the handlers
(watcher.serve.sync, acks, jobs, attach) change it. A session's policy (watcher.planning.policies) is
chosen once, at HELLO, and changes only when a reload changes the agent's settings
(:meth:`Session.apply_settings`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Protocol

from ipc.context import Context
from ipc.protocol import Proposal
from ipc.sections import Section, text_key, text_len
from summarizer.items import Ranks
from watcher.observe.digests import LEVELS
from watcher.planning.features import Features
from watcher.planning.lookahead import Lookahead
from watcher.planning.planner import Watermarks
from watcher.planning.policies import Policy, policy_for
from watcher.planning.scoring import Scorer

RemoteFeatures = Callable[[list[str], bool], Awaitable[list[Features] | None]]
PREPARE_SLICE_S = 0.002  # features computed per turn of the event loop before a plan (prepare_plan)
BIG_SECTION_CHARS = 16384  # a section whose features prepare_plan computes in a thread


@dataclass
class Pending:
    proposal: Proposal
    originals: tuple[Section, ...]
    method: str
    created: float = field(default_factory=time.monotonic)
    note: str = ""  # why a digest written with the model's summarizer is not the model's
    ranked_ahead: int = 0  # sections its digest ranked from scores read ahead (watcher.serve.readahead)


@dataclass
class StagedSnapshot:
    """The parts of a multi-part SNAPSHOT received so far (the mirror changes at the last one)."""

    version: int
    sections: list[Section] = field(default_factory=list)
    next_part: int = 0
    nbytes: int = 0  # bytes of the staged sections (watcher.serve.limits)


class IdSource(Protocol):
    def take(self, *prefixes: str) -> list[str]:
        """One new id per prefix (archive ref ``a``, digest id ``compactd-d``, proposal id ``p``)."""
        ...


class LocalIds:
    """Ids of a state without a store (tests, embedders): numbered per state, like its dict archive.
    The server installs its store's (watcher.store.ids: durable, never repeated after a restart)."""

    def __init__(self) -> None:
        self.last = 0

    def take(self, *prefixes: str) -> list[str]:
        first, self.last = self.last + 1, self.last + len(prefixes)
        return [f"{prefix}{first + i}" for i, prefix in enumerate(prefixes)]


@dataclass
class Session:
    agent: str
    session: str
    peer: bytes
    marks: Watermarks
    policy: str = "auto"  # auto | manual | off: does the daemon compact on its own?
    planner: Policy = field(default_factory=lambda: policy_for("optimistic"))  # when and what to compact
    ctx: Context = field(default_factory=Context)
    nbytes: int = 0  # bytes of the mirror's sections, kept by the server (watcher.serve.limits)
    synced: bool = True  # False after a RESYNC request, until the next SNAPSHOT
    resync_at: float = 0.0  # when RESYNC was last sent (repeated at most every few s while unsynced)
    staged: StagedSnapshot | None = None  # a multi-part SNAPSHOT in progress
    tokenizer: str = ""  # the agent's tokenizer hint from HELLO (its unit for budget and tokens)
    pending: dict[str, Pending] = field(default_factory=dict)
    # ref -> originals; the server installs a watcher.store.store.ArchiveView (durable, agent-scoped)
    archive: MutableMapping[str, tuple[Section, ...]] = field(default_factory=dict)
    ids: IdSource = field(default_factory=LocalIds)  # the server installs its store's (watcher.store.ids)
    job_running: bool = False
    planning: bool = False  # a job plans on a snapshot of the mirror (watcher.serve.packer waits)
    last_seen: float = field(default_factory=time.monotonic)
    stuck_reported: bool = False
    stuck_tokens: int = 0  # usage when compaction last found nothing to fold
    headroom_alert: bool = False  # a headroom_alert event is outstanding (watcher.serve.jobs)
    compactions: int = 0
    tokens_saved: int = 0
    deep_plans: int = 0  # plans folded deeper than the low watermark under load (watcher.serve.degrade)
    nacks: int = 0
    invalidated_tokens: int = 0
    scorer: Scorer = field(default_factory=Scorer)  # cached section features (watcher.planning.scoring)
    lookahead: Lookahead = field(default_factory=Lookahead)  # growth and job-time estimates
    job_submitted: float = 0.0  # when the running compaction job was planned (monotonic)
    job_started: float = 0.0  # when the scheduler started it (monotonic)
    degrade: int = 0  # the agent's level (watcher.serve.degrade), an index in observe.digests.LEVELS
    job_level: int = 0  # the running job's level (without load a late job's is not the agent's)
    # set while the running job waits for the model: once the context reaches hurry_at tokens, the
    # job gives up the model and digests deterministically (watcher.serve.modelrun)
    hurry: asyncio.Event | None = field(default=None, repr=False)
    hurry_at: int = 0
    model_input: int = 0  # tokens the running job's model digest reads (watcher.serve.modelcost)
    model_tokens: int | None = None  # the most tokens it may score (the time it has; None: no cap)
    # the model's scores of sections' lines read ahead (watcher.serve.readahead): id -> (text_key, ranks)
    ranks: dict[str, tuple[int, Ranks]] = field(default_factory=dict)
    read_through: int = -1  # the mirror's version when the reader found nothing left to read in it

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
            "planner": self.planner.name,
            "pending_proposals": len(self.pending),
            "compacting": self.job_running,
            "compactions": self.compactions,
            "tokens_saved": self.tokens_saved,
            "deep_plans": self.deep_plans,
            "nacks": self.nacks,
            "archived_sections": archived_sections(self.archive),
            "synced": self.synced,
            "tokenizer": self.tokenizer,
            "stuck": self.stuck_reported,
            "lookahead": self.lookahead.snapshot(),
            "degraded": LEVELS[self.degrade],
        }

    def count_applied(self, p: Proposal) -> None:
        """The agent applied ``p`` (an ACK, or one the store found applied after a lost ACK)."""
        self.compactions += 1
        self.tokens_saved += p.tokens_before - p.tokens_after
        self.invalidated_tokens += p.invalidated_prefix_tokens

    def apply_settings(self, marks: Watermarks, policy: str, planner: Policy) -> bool:
        """New budget, reserve, policy or planner (a reload); True if anything changed. The mirror,
        the archive and the pending proposals stay."""
        if (marks, policy, planner.name) == (self.marks, self.policy, self.planner.name):
            return False
        self.marks, self.policy, self.planner = marks, policy, planner
        self.stuck_tokens = 0
        return True


@contextlib.contextmanager
def hurry_at(state: Session, limit: int) -> Iterator[asyncio.Event]:
    """While the block runs, ``state.hurry``: an event set once the mirror reaches ``limit`` tokens
    (by watcher.serve.jobs.Jobs.maybe_compact, on the delta that reaches it; at once if it has), the
    running job's cue to stop waiting for the model."""
    hurry = state.hurry = asyncio.Event()
    state.hurry_at = limit
    if state.ctx.tokens >= limit:
        hurry.set()
    try:
        yield hurry
    finally:
        state.hurry = None


def ranks_of(state: Session, section: Section) -> Ranks | None:
    """The model's scores of ``section``'s lines read ahead (watcher.serve.readahead), if they were
    read of its text as the mirror holds it now; else None."""
    known = state.ranks.get(section.id)
    return known[1] if known is not None and known[0] == text_key(section) else None


def archived_sections(archive: MutableMapping[str, tuple[Section, ...]]) -> int:
    count = getattr(archive, "section_count", None)  # a store view counts in SQL
    return int(count()) if callable(count) else sum(len(v) for v in archive.values())


async def prepare_plan(
    state: Session, slice_s: float = PREPARE_SLICE_S, remote: RemoteFeatures | None = None
) -> None:
    """Compute the scoring features of the sections the agent's scorer has not seen.

    With ``remote`` (watcher.serve.digestpool.DigestPool.features: the digest worker process) they
    are computed there, off the interpreter lock: the loop only hands the texts over. Else, or if
    the worker failed, here: a slice of about ``slice_s`` at a time, yielding to the event loop
    between slices (a fresh 100-section context costs ~10 ms of features, which would otherwise
    hold up every agent's deltas in one go), and a section of more than BIG_SECTION_CHARS (a long
    tool output: tens of milliseconds alone, more than any slice) first in a thread, as the plan
    is (the agent's scorer is used only by its own job, one at a time). The plan that follows is
    the same either way (watcher.planning.scoring.Scorer)."""
    todo = state.scorer.missing(list(state.ctx))
    if remote is not None and todo:
        feats = await remote([s.text for s in todo], state.scorer.with_terms)
        if feats is not None:
            state.scorer.store(todo, feats)
            return
    big = [s for s in todo if text_len(s) > BIG_SECTION_CHARS]
    if big:
        await asyncio.to_thread(state.scorer.prepare, big)
    left = state.scorer.prepare(list(state.ctx), slice_s)
    while left:
        await asyncio.sleep(0)  # one turn of the loop: the frames that came meanwhile are served
        left = state.scorer.prepare(list(state.ctx), slice_s)
