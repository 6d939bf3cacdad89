"""Scheduling of compaction jobs: earliest deadline first, latest wins, the model in one lane.

Without it every agent that crosses its watermark starts an asyncio task, and the tasks race for
the single inference thread: a job's model deadline starts while it is still queued behind the
others (so under load jobs time out before they run and the summarizer turns itself degraded),
and each job digests the plan it made when it was queued, which the agent's later deltas have
often made stale by the time it runs.

Here each agent has at most one waiting slot. ``submit`` for an agent already waiting only
replaces its job (latest wins; the queue never holds more entries than there are agents). Each
slot carries the agent's **deadline**: when its next LLM call is expected not to fit its budget,
with a large turn of margin and never less than the reserve above its high watermark, so that a
context already in its reserve is due at its next turn (watcher.serve.jobs.Jobs.deadline,
watcher.planning.lookahead.Lookahead.deadline; read again each time the worker picks, so it
follows the agent's growth while it waits). The worker runs the slot with the earliest deadline
first, so the agent whose next turn would cross its budget first goes first. Starvation-free: a
slot's deadline counts as no later than :data:`MAX_WAIT_S` after it joined the queue and no earlier
than when it joined, so a slot that has waited ``MAX_WAIT_S`` goes before every slot that joined
after it, however urgent (``aged`` counts the jobs served by that bound). Without deadlines (or with
equal ones) the order is the order of joining, which with one slot per agent is round-robin: one
chatty agent cannot take turns from the others. Nor can an agent whose deadline is always past (one
growing faster than any compaction can fold it, over its budget again as soon as it is served):
an agent's next job counts as due no earlier than the agents waiting when its last job ended have
had their turn (their number x the measured job time / the lanes), so such an agent gets a turn
per queue cycle, not every other one. Jobs plan when they start, on the mirror as it is then.

Two lanes. A gist costs the model seconds, a deterministic digest milliseconds:

* the model lane holds at most one job; a job gets it only while the lane is free and at most
  :data:`MODEL_MAX_WAITING` agents wait, so the model writes gists when there is time and never
  makes a queue of agents wait for it. The lane is chosen when the job starts, before its first
  await (no loop turn decides it); the job then asks ``pick`` for its summarizer (the real one in
  the model lane), or gives the lane back (``deterministic``) when a model digest would come
  too late. A job that found the lane held may wait for it while its own deadline allows
  (``wait_model``: one such job at a time; it has the lane next);
* every other job digests deterministically, with the same token counting, in a worker process
  (watcher.serve.digestpool: the event loop keeps serving frames meanwhile), beside the job in the
  model lane; :data:`DETERMINISTIC_LANES` of them at once, so that one plans on the loop while
  the other's digest is computed in the worker.

When a job cannot be done before its deadline, the job degrades its agent to a cheaper strategy
(watcher.serve.degrade); ``on_idle`` is called when the queue has drained and nothing runs, which
is when degraded agents recover.

**Express jobs.** A job degrades when it starts, and under a herd (many agents crossing their
trigger together) that can be too late: the last of a long queue waits seconds for its turn, and
its budget is gone before it starts. So while jobs wait, the worker checks, each time a lane frees
or an agent joins, when each waiting job would be done: its place in deadline order times the
measured time between two jobs' starts while others wait (at least a deterministic job's time over
the lanes), plus :data:`EXPRESS_MARGIN` deterministic jobs. A waiting job that would be done after
its agent's *fallback due time* (:class:`Fallback`: when its next call is expected not to fit,
with a large turn of margin; watcher.serve.jobs.Jobs.express_due) runs its fallback job instead
(never the front of the line: its job is next anyway), at once and outside the lanes (masking old tool
outputs, or head and tail: about a millisecond; watcher.serve.jobs). Only agents that gave a
fallback, only while at least :data:`EXPRESS_MIN_WAITING` wait, only once a deterministic job's
time has been measured, and at most :data:`EXPRESS_LANES` at once: the most urgent first, the next
when one ends.

**Passes.** Reading every waiting job's deadline and sorting them (a *pass*) costs the loop a few
microseconds a job: at 1 600 agents, ~300 waiting, 2-3 ms a pass, and one on every join and every
job's end took a quarter of the loop's time. With a long queue (:data:`PASS_REUSE_MIN` or more
waiting) a pass's line is used again for up to :data:`PASS_EVERY_S`: a lane that frees takes the
first job of that line still waiting; an agent that joins meanwhile takes its place in that line
at once (its deadline read once, its express check made there). The line is read again at the
next pass, at most ``PASS_EVERY_S`` later, or at once when it runs out. A fallback held for an
express lane goes when one frees, in the order of the pass that held it, without a pass. Such a
queue is seconds long, so its order and its express checks move by less than a job in that time;
while it waits a pass is made at least every ``PASS_EVERY_S``. A shorter queue is passed on every
change, as it is cheap.

A pass over a queue of thousands (an overloaded machine: every agent waiting) costs tens of
milliseconds, which in one go would hold up every agent's deltas behind it. So a pass reads the
deadlines in slices of at most :data:`PASS_SLICE_S`, the loop serving frames between them, and a
long queue's next pass waits until the last one's cost is at most :data:`PASS_SHARE` of the time
since (at least ``PASS_EVERY_S``): the passes of a 3 000-deep queue take a bounded share of the
loop, not a quarter of it. A line kept longer is still served in its order; an agent that joins
takes its place in it at once, as above.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from summarizer.digest import Summarizer
from watcher.observe import logs
from watcher.serve.digestpool import DigestPool

log = logs.get("compactd.scheduler")

Job = Callable[[], Awaitable[None]]
Deadline = Callable[[], float]  # monotonic time by which the agent needs its compaction done
_Place = tuple[float, float, float]  # a waiting job's place in line (FairScheduler._key)
WAIT_SAMPLES = 4096  # recent queue waits kept for the percentiles in stats()
MODEL_MAX_WAITING = 2  # more agents waiting than this: jobs skip the model until the queue drains
DETERMINISTIC_LANES = 2  # jobs at once besides the model's: one plans on the loop while one digests
WAIT_ALPHA = 0.2  # weight of the newest queue wait in wait_s
MAX_WAIT_S = 30.0  # aging: a waiting job's deadline counts as no later than this after it joined
EXPRESS_MIN_WAITING = 2  # fewer waiting: no job is expedited (its turn is about to come)
EXPRESS_MARGIN = 2.0  # a waiting job is expected done at its turn + this many deterministic job times
EXPRESS_LANES = 2  # express jobs at once (each is a few ms on the loop: a herd of them would hold up ingest)
PASS_REUSE_MIN = 64  # this many waiting or more: a pass's line is used again for PASS_EVERY_S (Passes)
PASS_EVERY_S = 0.1  # a long queue's line is used this long before the next pass, or longer: PASS_SHARE
PASS_SHARE = 0.05  # a long queue's passes take at most this share of the loop's time (Passes)
PASS_SLICE_S = 0.002  # a pass yields to the loop after about this long (Passes)
PASS_SLICE_JOBS = 32  # jobs between two looks at the clock while a pass reads deadlines


def _never() -> float:
    return math.inf


def _ewma(old: float, new: float) -> float:
    return new if not old else old + WAIT_ALPHA * (new - old)


class _Slices:
    """The loop's time a sliced pass spends: :meth:`step`, once per job, lets the loop run once the
    current slice is PASS_SLICE_S long (the clock read every PASS_SLICE_JOBS jobs); :meth:`spent`
    is the sum of the slices (not the loop's turns between them)."""

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._spent = 0.0
        self._steps = 0

    async def step(self) -> bool:
        """True if the loop ran meanwhile (what the pass read before may have changed)."""
        self._steps += 1
        if self._steps % PASS_SLICE_JOBS:
            return False
        t = time.perf_counter()
        if t - self._start < PASS_SLICE_S:
            return False
        self._spent += t - self._start
        await asyncio.sleep(0)  # one turn of the loop: frames that came meanwhile are served
        self._start = time.perf_counter()
        return True

    def spent(self) -> float:
        return self._spent + time.perf_counter() - self._start


@dataclass(frozen=True)
class Fallback:
    """What a waiting agent runs at once instead of its job when its turn would come too late."""

    job: Job
    due: Deadline  # when the agent's job is needed done at the latest (inf: not at risk now); never
    # earlier than the deadline its job was submitted with (read only once that would be missed)


@dataclass(frozen=True)
class _Slot:
    """An agent's place in the queue: its latest job, when it joined, its deadline, its fallback."""

    job: Job
    since: float
    deadline: Deadline
    cheap: Fallback | None


class FairScheduler:
    def __init__(
        self, track: set[asyncio.Task[None]] | None = None, has_model: Callable[[], bool] = lambda: True
    ) -> None:
        """``track``: a set that holds each job's task while it runs (the server's ``tasks``, which
        shutdown cancels and an engine swap waits for); ``has_model``: is there a model lane at all
        (a daemon without a model gives every job a deterministic lane)."""
        self.track = track if track is not None else set()
        self._has_model = has_model
        self._jobs: dict[str, _Slot] = {}  # key -> the agent's latest job
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()  # a job ended
        self._worker: asyncio.Task[None] | None = None
        self._running: dict[asyncio.Task[None], str] = {}
        self._deferred: dict[str, tuple[Job, Deadline, Fallback | None]] = {}  # submitted while its job ran
        self._express: set[asyncio.Task[None]] = set()  # cheap jobs run outside the lanes
        self._held: dict[str, None] = {}  # for an express lane, in line order: not started in a normal one
        self._model: asyncio.Task[None] | None = None  # the job in the model lane
        self._heir: tuple[asyncio.Task[None], asyncio.Future[None]] | None = None  # waits for the lane
        self.lane_waits = 0  # running jobs that waited for the model lane (wait_model) ...
        self.lane_waits_won = 0  # ... and got it in time
        self.submitted = 0
        self.coalesced = 0  # submits that replaced a waiting job of the same agent
        self.served = 0
        self.failed = 0
        self.model_jobs = 0
        self.model_skipped = 0  # jobs of a daemon with a model that digested without it
        self.max_depth = 0
        self.aged = 0  # jobs that went first because they had waited MAX_WAIT_S, not by deadline
        self.late = 0  # jobs started after their deadline
        self.expedited = 0  # waiting jobs replaced by their cheap job (their turn would be too late)
        self.on_idle: Callable[[], None] | None = None  # the queue drained and nothing runs
        self._waits: deque[float] = deque(maxlen=WAIT_SAMPLES)
        self._waited = 0  # waits recorded so far: the percentiles below are sorted once per change
        self._pcts: tuple[int, float, float] = (0, 0.0, 0.0)  # (_waited, p50 ms, p99 ms)
        self.max_wait_s = 0.0
        self.wait_s = 0.0  # EWMA seconds a job waits in the queue (what a job planned now should expect)
        self.run_s = 0.0  # EWMA seconds a job runs (start to end)
        self.det_run_s = 0.0  # ... a job outside the model lane (0: none measured yet)
        self.start_gap_s = 0.0  # EWMA seconds between two jobs' starts while others wait
        self._last_start = 0.0
        self._backlog = False  # jobs were left waiting when the last one started
        self._started: dict[asyncio.Task[None], float] = {}
        self._not_before: dict[str, float] = {}  # an agent just served yields to those waiting then
        self._line: list[tuple[_Place, str]] | None = None  # the last pass's line (Passes)
        self._joined: list[str] = []  # agents that joined since the last pass
        self._passed = -math.inf  # when it was made
        self._pass_cost = 0.0  # the loop's seconds the last pass took (its slices, not the loop between)
        self.passes = 0
        self.pass_ms_max = 0.0  # the longest pass, in the loop's time
        self.pool = DigestPool()

    @property
    def depth(self) -> int:
        """Agents waiting for their turn (not counting those running)."""
        return len(self._jobs)

    @property
    def model_busy(self) -> bool:
        """Does a job hold the model lane?"""
        return self._model is not None

    @property
    def running(self) -> int:
        return len(self._running)

    def submit(self, key: str, job: Job, deadline: Deadline = _never, cheap: Fallback | None = None) -> None:
        """Queue ``job`` for agent ``key``; ``deadline`` says when the agent needs it done (read
        each time the worker picks the next job); ``cheap``: what to run instead, at once, if the
        job's turn would come too late (see Express jobs above; None: the job waits its turn)."""
        self.submitted += 1
        if key in self._running.values():  # one job per agent at a time: it queues when this ends
            self.coalesced += key in self._deferred
            self._deferred[key] = (job, deadline, cheap)
            return
        if key in self._jobs:
            self._jobs[key] = _Slot(job, self._jobs[key].since, deadline, cheap)  # keeps when it joined
            self.coalesced += 1
            return
        self._jobs[key] = _Slot(job, time.monotonic(), deadline, cheap)
        self._joined.append(key)
        self.max_depth = max(self.max_depth, len(self._jobs))
        if self._heir is not None and len(self._jobs) > MODEL_MAX_WAITING:
            self._disinherit()  # the queue grows: the job waiting for the model lane goes without it
        self._wake.set()
        self._changed.set()  # a worker waiting for a lane looks at the queue again (express)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name="compaction-scheduler")

    def pick(self, summarizer: Summarizer) -> Summarizer:
        """The summarizer for the job running now: ``summarizer`` itself if the job was given the
        model lane when it started, else a deterministic one whose digests run in the worker
        process (and the lane, if it held it, goes back: a daemon whose model is gone). A job the
        lane was busy for may still wait for it (:meth:`wait_model`)."""
        if summarizer.engine is not None:
            if self.holds_model():
                self.model_jobs += 1
                return summarizer
            self.model_skipped += 1
        return self.deterministic(summarizer)

    def holds_model(self) -> bool:
        """Does the job running now hold the model lane?"""
        return self._model is not None and asyncio.current_task() is self._model

    def deterministic(self, summarizer: Summarizer) -> Summarizer:
        """A deterministic summarizer for the job running now; it gives back the model lane if it
        held it (its digest must be ready sooner than the model's would be)."""
        if self.holds_model():
            self._free_model()
        return self.pool.summarizer(summarizer)

    async def wait_model(self, within: float, until: asyncio.Event | None = None) -> bool:
        """The job running now, which ``pick`` gave no model lane (another job held it), waits for
        that lane up to ``within`` seconds, or until ``until`` is set: True if it holds it now
        (:meth:`took_model` then counts its job as a model job). Only one job waits at a time, and
        only while at most MODEL_MAX_WAITING jobs wait in the queue (the lane's rule when a job
        starts): a second one, or a long queue, gets False at once, and the wait ends without the
        lane when the queue grows past that meanwhile. The lane goes to the waiting job when its
        holder ends or gives it back, before any job that starts meanwhile."""
        task = cast("asyncio.Task[None] | None", asyncio.current_task())
        if task is None or task not in self._running or task is self._model or within <= 0:
            return False
        if self._heir is not None or self.depth > MODEL_MAX_WAITING or not self._has_model():
            return False
        self.lane_waits += 1
        if self._model is None:
            self._model = task
        else:
            heir: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._heir = (task, heir)
            waits: list[asyncio.Future[Any]] = [heir]
            stop = asyncio.create_task(until.wait()) if until is not None else None
            if stop is not None:
                waits.append(stop)
            try:  # (asyncio.wait cancels neither on its timeout)
                await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if stop is not None:
                    stop.cancel()
                if self._heir is not None and self._heir[1] is heir:
                    self._heir = None
            if self._model is not task:
                return False
        self.lane_waits_won += 1
        return True

    def took_model(self) -> None:
        """A job that ``pick`` counted as skipping the model runs with it after all (wait_model)."""
        self.model_jobs += 1
        self.model_skipped -= 1

    def _disinherit(self) -> None:
        """The job waiting for the model lane stops waiting, without it (wait_model returns False)."""
        if self._heir is not None:
            _, heir = self._heir
            self._heir = None
            if not heir.done():
                heir.set_result(None)

    def _free_model(self) -> None:
        """The model lane's job ends or gives the lane back: to the job waiting for it, if any."""
        self._model = None
        if self._heir is not None:
            task, heir = self._heir
            self._heir = None
            if not task.done() and not heir.done():
                self._model = task
                heir.set_result(None)

    def discard(self, key: str) -> bool:
        """Forget an agent's waiting job (it detached); True if there was one."""
        self._not_before.pop(key, None)
        if self._deferred.pop(key, None) is not None:
            return True
        return self._jobs.pop(key, None) is not None

    def waiting(self, key: str) -> bool:
        return key in self._jobs or key in self._deferred

    def _key(self, key: str, slot: _Slot) -> _Place:
        """A waiting job's place in line: its deadline clamped to [joined, joined + MAX_WAIT_S]
        (aging) and to no earlier than its agent's last turn allows, then when it joined; and the
        deadline itself."""
        d = slot.deadline()
        due = max(d, slot.since, self._not_before.get(key, 0.0))
        return (min(due, slot.since + MAX_WAIT_S), slot.since, d)

    def _next(self, now: float, line: list[tuple[_Place, str]] | None = None) -> str:
        """The waiting agent to serve now: the earliest deadline, each clamped to [joined,
        joined + MAX_WAIT_S] (aging), ties to the one that joined first; not one held for an express
        lane. ``line``: the waiting jobs' places as a pass computed them (else computed here); those
        no longer waiting are skipped; "" when none is left."""
        jobs, held = self._jobs, self._held
        no_one: tuple[_Place, str] = ((math.inf, math.inf, math.inf), "")
        if line is None:
            places = ((self._key(key, slot), key) for key, slot in jobs.items() if key not in held)
            best_key, best = min(places, default=no_one)
        else:  # sorted: the first still waiting; those served since are dropped from its front
            gone = 0
            while gone < len(line) and line[gone][1] not in jobs:
                gone += 1
            del line[:gone]
            best_key, best = next(((k, key) for k, key in line if key in jobs and key not in held), no_one)
        if not best:
            return ""
        if best_key[2] > best_key[1] + MAX_WAIT_S <= now:  # served by the bound, not by its deadline
            self.aged += 1
        if best_key[2] < now:
            self.late += 1
        return best

    async def _expedite(self, now: float) -> list[tuple[_Place, str]] | None:
        """Run at once the fallback of each waiting agent whose job, at its place in line, would be
        done after its fallback's due time (Express jobs, above); those beyond
        :data:`EXPRESS_LANES` are held (not started in a lane: their fallback goes when an express
        job ends). Returns the line of the jobs still waiting, in order (None: not computed, too few
        waiting or no job time measured yet). In slices (Passes): jobs may join, leave or be
        replaced meanwhile (a joiner is placed by the next :meth:`_place_joined`)."""
        self._held.clear()
        self._joined.clear()  # placed by this pass
        if len(self._jobs) < EXPRESS_MIN_WAITING or self.det_run_s <= 0:
            return None
        self.passes += 1
        clock = _Slices()
        line: list[tuple[_Place, str]] = []
        for key in list(self._jobs):
            await clock.step()
            slot = self._jobs.get(key)  # gone or replaced while the loop ran between slices
            if slot is not None:
                line.append((self._key(key, slot), key))
        line.sort()
        now = time.monotonic()
        ahead = 0  # jobs in front that will take a lane
        for place, key in line:
            if await clock.step():
                now = time.monotonic()
            if key in self._jobs and not self._express_if_late(key, place, ahead, now):
                ahead += 1
        self._pass_cost = clock.spent()
        self.pass_ms_max = max(self.pass_ms_max, self._pass_cost * 1000)
        return [(place, key) for place, key in line if key in self._jobs]

    def _express_if_late(self, key: str, place: _Place, ahead: int, now: float) -> bool:
        """Would the waiting job of ``key``, with ``ahead`` jobs in front of it, be done after its
        fallback's due time? Then its fallback starts now, or is held for an express lane; True if
        so (it no longer takes a lane)."""
        slot = self._jobs[key]
        per = self.det_run_s
        gap = max(self.start_gap_s, per / DETERMINISTIC_LANES)  # between two jobs' starts, measured
        done = now + (ahead + 1) * gap + EXPRESS_MARGIN * per
        # the front is next anyway; done by its deadline is done by its due time (Fallback.due)
        if slot.cheap is None or not ahead or done <= place[2] or done <= slot.cheap.due():
            return False
        if len(self._express) >= EXPRESS_LANES:
            self._held[key] = None  # its fallback goes when an express job ends (_release)
        else:
            self._go_express(key, slot.cheap, now)
        return True

    def _go_express(self, key: str, cheap: Fallback, now: float) -> None:
        """Start ``key``'s fallback now, outside the lanes, in place of its waiting job."""
        slot = self._jobs.pop(key)
        self.expedited += 1
        self._start(key, cheap.job, now - slot.since, express=True)

    def _place_joined(self, now: float) -> None:
        """Agents that joined since the last pass, while its line is kept: each takes its place in
        that line (its deadline read once) and gets its express check there, at once rather than
        at the next pass. Those in front of it are counted as the line holds them (some may have
        left since: an early express rather than a late one)."""
        line = self._line
        if line is not None and self.det_run_s > 0:
            for key in self._joined:
                if key in self._jobs and key not in self._held:
                    entry = (self._key(key, self._jobs[key]), key)
                    bisect.insort(line, entry)
                    self._express_if_late(key, entry[0], bisect.bisect_left(line, entry), now)
        self._joined.clear()

    def _release(self, now: float) -> None:
        """Start the fallbacks held for an express lane, the most urgent first, while lanes are free."""
        while self._held and len(self._express) < EXPRESS_LANES:
            key = next(iter(self._held))
            del self._held[key]
            slot = self._jobs.get(key)
            if slot is not None and slot.cheap is not None:  # else served, discarded, or replaced
                self._go_express(key, slot.cheap, now)

    def _pass_due(self) -> float:
        """When a long queue's next pass is due: PASS_EVERY_S after the last, or later, so that
        passes take at most PASS_SHARE of the loop's time (Passes)."""
        return self._passed + max(PASS_EVERY_S, self._pass_cost / PASS_SHARE)

    async def _pass(self, now: float, force: bool = False) -> bool:
        """A pass (Passes, above), unless the last one's line may still serve; True if one was made."""
        kept = self._line is not None and len(self._jobs) >= PASS_REUSE_MIN
        if kept and not force and now < self._pass_due():
            return False
        self._line = await self._expedite(now)
        self._passed = now
        return True

    async def _idle(self, now: float) -> None:
        """Wait until a job ends or an agent joins; with a line kept from the last pass, no longer
        than until the next pass is due (an agent that joined meanwhile is placed then)."""
        if self._line is None or len(self._jobs) < PASS_REUSE_MIN:
            await self._changed.wait()
            return
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that
        # comes as the event is set, and the worker then outlives close() (which waits for it)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, self._pass_due() - now)):
                await self._changed.wait()

    def _may_start(self) -> bool:
        """A free deterministic lane (the job in the model lane and express jobs do not take one)."""
        lanes = sum(task is not self._model and task not in self._express for task in self._running)
        return lanes < DETERMINISTIC_LANES

    async def _work(self) -> None:
        while True:
            while not self._jobs:
                self._wake.clear()
                await self._wake.wait()
            self._changed.clear()
            now = time.monotonic()
            self._release(now)
            fresh = await self._pass(now)
            if fresh:
                now = time.monotonic()  # a pass yields to the loop between its slices
            else:
                self._place_joined(now)
            if not self._jobs:  # discarded or expedited meanwhile
                continue
            lane = self._may_start()
            key = self._next(now, self._line) if lane else ""
            if lane and not key and not fresh:  # the kept line ran out: a pass places those who joined
                await self._pass(now, force=True)
                now = time.monotonic()
                key = self._next(now, self._line) if self._jobs else ""
            if not key:  # no free lane, or every waiting job is held for an express one
                await self._idle(now)  # a job ended, an agent joined, or a pass is due
                continue
            slot = self._jobs.pop(key)
            task = self._start(key, slot.job, now - slot.since)
            if self._backlog:  # jobs waited since the last start: the pace at which the lanes take them
                self.start_gap_s = _ewma(self.start_gap_s, now - self._last_start)
            self._last_start, self._backlog = now, bool(self._jobs)
            lane_free = self._model is None and self._heir is None  # (a waiting job has it next)
            if lane_free and self.depth <= MODEL_MAX_WAITING and self._has_model():
                self._model = task  # its lane is chosen now, before the job's first await

    def _start(self, key: str, job: Job, wait: float, express: bool = False) -> asyncio.Task[None]:
        self._waits.append(wait)
        self._waited += 1
        self.wait_s += WAIT_ALPHA * (wait - self.wait_s)
        self.max_wait_s = max(self.max_wait_s, wait)
        task = asyncio.create_task(self._run(key, job), name=f"compact-{key}")
        self._running[task] = key
        self._started[task] = time.monotonic()
        if express:
            self._express.add(task)
        self.track.add(task)
        task.add_done_callback(self._ended)
        return task

    async def _run(self, key: str, job: Job) -> None:
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except Exception:  # a job's bug must not stop the others' compaction
            self.failed += 1
            log.exception("compaction_job_failed", agent=key)

    def _ended(self, task: asyncio.Task[None]) -> None:
        key = self._running.pop(task, None)
        self.track.discard(task)
        now = time.monotonic()
        ran = now - self._started.pop(task, now)
        express = task in self._express
        self._express.discard(task)
        self.run_s = _ewma(self.run_s, ran)
        if task is not self._model and not express:
            self.det_run_s = _ewma(self.det_run_s, ran)
        if key is not None:  # its next job goes after those waiting now (their turn, at this pace)
            self._not_before[key] = now + len(self._jobs) * self.run_s / DETERMINISTIC_LANES
            if len(self._not_before) > 2 * (len(self._jobs) + len(self._running)) + 64:
                self._not_before = {k: t for k, t in self._not_before.items() if t > now}
        if task is self._model:
            self._free_model()
        self.served += 1
        self._changed.set()
        if key is not None and (deferred := self._deferred.pop(key, None)) is not None:
            self.submitted -= 1  # counted when it was deferred
            self.submit(key, *deferred)  # joins the queue now
        if not self._jobs and not self._running and self.on_idle is not None:
            self.on_idle()

    async def close(self) -> None:
        self._jobs.clear()
        self._not_before.clear()
        self._deferred.clear()
        tasks = [t for t in (self._worker, *self._running) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._worker = None
        self.pool.close()

    def stats(self) -> dict[str, Any]:
        """Queue figures for STATUS (``daemon.compaction_queue``) and the load benchmark."""
        if self._pcts[0] != self._waited:  # (stalled agents ask STATUS often: sort once per change)
            waits = sorted(self._waits)

            def pct(q: float) -> float:
                return round(waits[min(len(waits) - 1, int(q * len(waits)))] * 1000, 1) if waits else 0.0

            self._pcts = (self._waited, pct(0.5), pct(0.99))
        _, p50, p99 = self._pcts
        return {
            "depth": self.depth,
            "max_depth": self.max_depth,
            "running": self.running,
            "model_busy": self._model is not None,
            "submitted": self.submitted,
            "coalesced": self.coalesced,
            "served": self.served,
            "failed": self.failed,
            "aged": self.aged,
            "late": self.late,
            "expedited": self.expedited,
            "model_jobs": self.model_jobs,
            "model_skipped": self.model_skipped,
            "lane_waits": self.lane_waits,
            "lane_waits_won": self.lane_waits_won,
            "digests_in_worker": self.pool.remote,
            "digests_on_loop": self.pool.local,
            "digests_refitted": self.pool.refits,
            "features_in_worker": self.pool.features_remote,
            "passes": self.passes,
            "pass_ms_max": round(self.pass_ms_max, 2),
            "wait_ms_p50": p50,
            "wait_ms_p99": p99,
            "wait_ms_max": round(self.max_wait_s * 1000, 1),
            "wait_ms_mean": round(self.wait_s * 1000, 1),
        }
