"""Fair scheduling of compaction jobs: one at a time, agents served round-robin, latest wins.

Without it every agent that crosses its watermark starts an asyncio task, and the tasks race for
the single inference thread: a job's model deadline starts while it is still queued behind the
others (so under load jobs time out before they run and the summarizer turns itself degraded),
and each job digests the plan it made when it was queued, which the agent's later deltas have
often made stale by the time it runs.

Here each agent has at most one slot in a ring. ``submit`` for an agent already waiting only
replaces its job (latest wins; the queue never holds more entries than there are agents); the
worker takes the agent at the head, runs its job to the end, and the agent's next job goes to the
back of the ring, so one chatty agent cannot take turns from the others. Jobs plan when they
start, on the mirror as it is then.

Overload: a gist costs the model seconds, a deterministic digest milliseconds. While more than
:data:`MODEL_MAX_WAITING` agents wait for their turn, jobs digest without the model (``pick``), so
the queue drains in milliseconds per agent and headroom is restored for everyone, instead of each
agent waiting a whole round of gists; the model is used again as soon as the queue is short.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from summarizer.digest import Summarizer
from watcher import logs

log = logs.get("compactd.scheduler")

Job = Callable[[], Awaitable[None]]
WAIT_SAMPLES = 4096  # recent queue waits kept for the percentiles in stats()
MODEL_MAX_WAITING = 2  # more agents waiting than this: digests skip the model until the queue drains


class FairScheduler:
    def __init__(self, track: set[asyncio.Task[None]] | None = None) -> None:
        """``track``: a set that holds each job's task while it runs (the server's ``tasks``, which
        shutdown cancels and an engine swap waits for)."""
        self.track = track if track is not None else set()
        self._ring: deque[str] = deque()
        self._jobs: dict[str, tuple[Job, float]] = {}  # key -> (latest job, when it joined the ring)
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self.running: str | None = None
        self.submitted = 0
        self.coalesced = 0  # submits that replaced a waiting job of the same agent
        self.served = 0
        self.failed = 0
        self.model_skipped = 0  # jobs that went deterministic because the queue was long
        self.max_depth = 0
        self._waits: deque[float] = deque(maxlen=WAIT_SAMPLES)
        self.max_wait_s = 0.0

    @property
    def depth(self) -> int:
        """Agents waiting for their turn (not counting the one running)."""
        return len(self._ring)

    def submit(self, key: str, job: Job) -> None:
        self.submitted += 1
        if key in self._jobs:
            self._jobs[key] = (job, self._jobs[key][1])  # keeps its place in the ring
            self.coalesced += 1
            return
        self._jobs[key] = (job, time.monotonic())
        self._ring.append(key)
        self.max_depth = max(self.max_depth, len(self._ring))
        self._wake.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name="compaction-scheduler")

    def pick(self, summarizer: Summarizer) -> Summarizer:
        """The summarizer for the job starting now: ``summarizer`` while the queue is short, else the
        same without its model (deterministic digests, same token counting)."""
        if summarizer.engine is None or self.depth <= MODEL_MAX_WAITING:
            return summarizer
        self.model_skipped += 1
        return Summarizer(None, count=summarizer.count)

    def discard(self, key: str) -> bool:
        """Forget an agent's waiting job (it detached); True if there was one."""
        if self._jobs.pop(key, None) is None:
            return False
        with contextlib.suppress(ValueError):
            self._ring.remove(key)
        return True

    def waiting(self, key: str) -> bool:
        return key in self._jobs

    async def _work(self) -> None:
        while True:
            while not self._ring:
                self._wake.clear()
                await self._wake.wait()
            key = self._ring.popleft()
            job, since = self._jobs.pop(key)
            wait = time.monotonic() - since
            self._waits.append(wait)
            self.max_wait_s = max(self.max_wait_s, wait)
            self.running = key
            task = asyncio.create_task(_call(job), name=f"compact-{key}")
            self.track.add(task)
            try:
                await task
            except asyncio.CancelledError:
                task.cancel()
                raise
            except Exception:  # a job's bug must not stop the others' compaction
                self.failed += 1
                log.exception("compaction_job_failed", agent=key)
            finally:
                self.track.discard(task)
                self.running = None
                self.served += 1

    async def close(self) -> None:
        self._ring.clear()
        self._jobs.clear()
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None

    def stats(self) -> dict[str, Any]:
        """Queue figures for STATUS (``daemon.compaction_queue``) and the load benchmark."""
        waits = sorted(self._waits)

        def pct(q: float) -> float:
            return round(waits[min(len(waits) - 1, int(q * len(waits)))] * 1000, 1) if waits else 0.0

        return {
            "depth": self.depth,
            "max_depth": self.max_depth,
            "running": self.running is not None,
            "submitted": self.submitted,
            "coalesced": self.coalesced,
            "served": self.served,
            "failed": self.failed,
            "model_skipped": self.model_skipped,
            "wait_ms_p50": pct(0.5),
            "wait_ms_p99": pct(0.99),
            "wait_ms_max": round(self.max_wait_s * 1000, 1),
        }


async def _call(job: Job) -> None:
    await job()
