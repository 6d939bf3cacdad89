"""The model reads ahead: while its lane is free, it ranks the lines of the sections the next
compactions are likely to fold, so that their digests find them ranked.

A digest's model job has seconds at most: the look-ahead starts it when the context nears its
trigger, and it must be done before the high watermark at the agent's pace. Most digests missed the
model for want of that time (docs/BENCHMARKS.md, "Deliver 3": ``deadline``, ``late`` and ``busy``
were half of them), while the model sat idle between them. The model's ranking of a section's lines
(summarizer.select: self-information from one prefill) depends on the section's text alone, so it
can be read at any time before the digest: here, while the queue is quiet (no job holds the model
lane, none waits, none was submitted for :data:`READ_QUIET_S`: a loaded daemon's cores go to its
compactions and its agents first), one section at a time.

What is read: the foldable sections (what the planner may fold, watcher.planning.planner.anchor_mask:
not anchors, not in the freshest turns unless too large to stay there) of at least
:data:`READ_MIN_TOKENS`, each once (keyed by its text: a replaced section is read again), of the
agents whose context holds at least :data:`READ_FROM` of their high watermark. The model reads a few
hundred tokens a second, and agents at a brisk pace bring more than that, so its reads are spread:
each read goes to the agent (of the :data:`AGENTS_TRIED` nearest their high watermark) whose next
region holds the fewest sections read, and there to the largest unread section. The scores go with
the section into any digest of a region holding it (``Item.ranks``, watcher.serve.jobs.items_of),
model job or deterministic one in the digest worker: the model's choice of lines without the
model's time.

A model job preempts a read in progress (:meth:`ReadAhead.preempt`: the engine stops at its next
batch), and reading takes at most :data:`READ_SHARE` of the time (it pauses as long as it read, at
0.5). ``[model] read_ahead_tokens`` caps the tokens read per section; 0 turns reading off.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any, Final, Literal

from ipc.sections import Section, text_key
from summarizer.items import Item, Ranks
from watcher.observe import logs
from watcher.planning.planner import anchor_mask, oversize_limit
from watcher.serve.hub import Hub
from watcher.serve.session import Session, ranks_of

log = logs.get("compactd.readahead")

READ_EVERY_S: Final = 0.25  # how often an idle reader looks for a section to read
READ_FROM: Final = 0.5  # an agent's context must hold this share of its high watermark to be read ahead
READ_MIN_TOKENS: Final = 64  # smaller sections are shown whole in a digest: nothing to rank
READ_QUIET_S: Final = 1.0  # no job submitted, waiting or holding the model for this long: reading may start
READ_SHARE: Final = 0.5  # reading takes at most this share of the time (a pause after each read)
READ_TIMEOUT_S: Final = 10.0  # one section's read, at most
READ_RETRY_S: Final = 30.0  # after a failed read, the next one waits this long
Outcome = Literal["read", "preempted", "failed"]  # of one read (ReadAhead.read)
AGENTS_TRIED: Final = 4  # agents looked at for each read, the nearest their high watermark


class ReadAhead:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self._task: asyncio.Task[Ranks | None] | None = None  # the read in progress
        self.sections = 0  # sections read (scored, or found with nothing to rank)
        self.tokens = 0  # tokens of the sections read
        self.seconds = 0.0  # the model's time reading
        self.preempted = 0  # reads a model job cut off
        self.failed = 0  # reads that timed out or failed (the section is tried again later)
        self._submitted = -1  # the scheduler's count of submitted jobs when last looked at
        self._quiet_since = time.monotonic()  # since when no job was submitted, waiting or in the model
        self.digests = 0  # digests that ranked sections from their reads
        self.digests_shown = 0  # ... and showed lines of the model's choice (method "model")

    def tokens_per_section(self) -> int:
        return self.hub.cfg.model.read_ahead_tokens

    def preempt(self) -> None:
        """A model job wants the engine: stop the read in progress (at the engine's next batch)."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            self.preempted += 1

    def used(self, sections: int, shown: bool) -> None:
        """A digest ranked ``sections`` sections from their reads (``shown``: it is the model's)."""
        if sections:
            self.digests += 1
            self.digests_shown += shown

    def may_read(self, now: float) -> bool:
        """Reading is on, the model usable, its lane free, and the queue quiet: no job waiting now and
        none submitted for READ_QUIET_S (a daemon compacting for many agents, whose queue empties
        between jobs, leaves its cores to them: at 800 agents reading cost 14 points of CPU and
        3 ms of ingest p99 for no model digest, docs/BENCHMARKS.md "The model reads ahead")."""
        summ, sched = self.hub.summarizer, self.hub.scheduler
        if sched.submitted != self._submitted or sched.depth or sched.model_busy:
            self._submitted, self._quiet_since = sched.submitted, now
        return (
            self.tokens_per_section() > 0
            and summ.engine is not None
            and not summ.degraded
            and now - self._quiet_since >= READ_QUIET_S
        )

    async def run(self) -> None:
        """Read while the daemon runs (a task of the server's; cancelled at shutdown)."""
        pause = READ_EVERY_S
        while True:
            await asyncio.sleep(pause)
            pause = READ_EVERY_S
            if not self.may_read(time.monotonic()):
                continue
            picked = self.next_section()
            if picked is None:
                continue
            state, section = picked
            t0 = time.monotonic()
            outcome = await self.read(state, section)
            spent = time.monotonic() - t0
            if outcome == "read":
                pause = max(READ_EVERY_S, spent * (1 - READ_SHARE) / READ_SHARE)
            elif outcome == "failed":  # timed out, or the backend cannot score: not again at once
                pause = READ_RETRY_S

    async def read(self, state: Session, section: Section) -> Outcome:
        """Read one section; its scores go to ``state.ranks``: "read", or "preempted" by a model job,
        or "failed" (timed out, the backend cannot score, or the model is not usable)."""
        summ = self.hub.summarizer
        item = Item(section.id, section.kind, section.text, section.tokens)
        task = self._task = asyncio.create_task(
            summ.read_ahead(item, self.tokens_per_section(), READ_TIMEOUT_S), name=f"read-ahead-{state.agent}"
        )
        t0 = time.monotonic()
        try:
            ranks = await task
        except asyncio.CancelledError:
            if task.cancelled() and not _cancelling():  # preempted by a model job, not our own cancel
                return "preempted"
            raise
        finally:
            self._task = None
            self.seconds += time.monotonic() - t0
        if ranks is None:
            self.failed += 1
            return "failed"
        state.ranks[section.id] = (text_key(section), ranks)
        self.sections += 1
        self.tokens += section.tokens
        return "read"

    def next_section(self) -> tuple[Session, Section] | None:
        """What to read next: of the agents nearest their high watermark (at most AGENTS_TRIED), the
        one whose next region holds the fewest sections read so far (the nearest first on a tie),
        and of that region its largest unread section (:meth:`_unread`)."""
        near: list[tuple[float, Session]] = []
        for state in self.hub.agents.values():
            if state.policy != "auto" or not state.planner.plans_ahead or not state.synced:
                continue
            if state.job_running:  # its region is being folded now
                continue
            if state.read_through == state.ctx.version:
                continue  # nothing left to read until the mirror changes
            high = state.marks.high  # (its trigger is at most this: O(1) for every agent)
            if high > 0 and state.ctx.tokens >= READ_FROM * high:
                near.append((state.ctx.tokens / high, state))
        near.sort(key=lambda x: -x[0])
        best: tuple[tuple[float, int], Session, Section] | None = None
        for rank, (_, state) in enumerate(near[:AGENTS_TRIED]):
            unread = self._unread(state)
            if unread is None:
                state.read_through = state.ctx.version
                continue
            read, section = unread
            if best is None or (read, rank) < best[0]:
                best = ((read, rank), state, section)
        return None if best is None else (best[1], best[2])

    def _unread(self, state: Session) -> tuple[float, Section] | None:
        """(sections read in the agent's next region, what to read there next), or None if nothing
        is left. The next region: the oldest foldable sections, as many tokens as a plan at the high
        watermark folds (the gap down to the low one, and a sixth more for its digest; a plan
        favours old regions: watcher.planning.planner). Its largest unread section goes first: the
        larger a section, the more of it a digest cuts, so the more the model's choice of its lines
        weighs; and one read in each of several regions gives more digests the model's choice than
        all of one. Past the region (read whole: ``inf`` read), the oldest unread section."""
        sections = list(state.ctx)
        if len(state.ranks) > len(sections):  # folded sections' scores: forget them
            held = {s.id for s in sections}
            state.ranks = {sid: r for sid, r in state.ranks.items() if sid in held}
        anchors = anchor_mask(sections, self.hub.cfg.compaction.fresh_turns, oversize_limit(state.marks))
        room = (state.marks.high - state.marks.low) * 6 // 5  # the next region: the gap and its digest
        read, largest, later = 0, None, None
        for s, anchored in zip(sections, anchors, strict=True):
            if anchored:
                continue
            inside, room = room > 0, room - s.tokens
            if s.tokens < READ_MIN_TOKENS:
                continue
            if ranks_of(state, s) is not None:
                read += inside
            elif inside:
                largest = s if largest is None or s.tokens > largest.tokens else largest
            elif later is None:
                later = s
                break
        if largest is not None:
            return read, largest
        return None if later is None else (math.inf, later)

    def stats(self) -> dict[str, Any]:
        """STATUS ``daemon.read_ahead``."""
        return {
            "tokens_per_section": self.tokens_per_section(),
            "sections": self.sections,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 3),
            "preempted": self.preempted,
            "failed": self.failed,
            "digests": self.digests,
            "digests_shown": self.digests_shown,
            "reading": self._task is not None,
        }


def _cancelling() -> bool:
    """Is the current task itself being cancelled (shutdown), not only the read it awaited?"""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
