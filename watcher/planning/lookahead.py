"""Look-ahead: start a compaction early enough that its digest is ready before it is needed.

Per agent, running estimates (exponentially weighted moving averages):

* **growth**: tokens per turn (mean and variance) and seconds per turn, from the context growing
  (a change that adds tokens is a growth step; changes that follow each other within
  ``TURN_GAP_S`` are one step, so an agent sending a turn as a burst of deltas is not mistaken for
  one growing hundreds of times a second; a shrink, a compaction applied, only moves the baseline,
  and so does growth back to back with the first change seen: an agent that attaches and sends
  its history turn after turn is starting, not taking one enormous turn). Both end in time: a
  step after ``STEP_MAX_S``, the start after ``START_MAX_S``, so an agent that streams deltas
  without pause (closer together than ``TURN_GAP_S``) is seen growing at its pace, step after
  step, not starting forever; its growth per second (``rate``) is measured over windows of at
  least ``RATE_WINDOW_S`` whatever its steps;
* **the largest turn lately** (``tail``): at each step the larger of that step's tokens and the
  tail so far times ``TAIL_DECAY``; each append of the history sent at attach counts as a turn too,
  and a history seen at once (a SNAPSHOT, or one append of many sections: an agent resuming its
  session through the proxy or an adapter) counts its last sections, oldest first (:meth:`history`).
  Tool output sizes run in streaks (an agent that has just read a 6 000-token log or file reads
  another soon: the same test run again, the next file), and a turn larger than the reserve above
  the high watermark is what stalls an agent;
* **job time** of the deterministic jobs: seconds from planning a compaction to its proposal being
  ready (queueing included), and the summarizer's throughput in region tokens per second.

A model job's time is not the agent's: it is the daemon's measured cost of the job
(watcher.serve.modelcost: the tokens the model will read over the measured prefill rate, plus the
measured overhead and the queue), passed in as ``model_s``.

:meth:`Lookahead.tokens_ahead` is how much the context is expected to grow while a job started now
runs. A deterministic job (milliseconds): its growth plus one large turn (mean + ``BURST_SIGMAS``
deviations: tool output comes in bursts, and a turn arrives before the agent can apply a proposal).
When the agent's largest turn lately (``tail``, at most what a plan can make room for: the budget less
the low watermark) is larger than the reserve above the high watermark, the margin is at least the
part of it the reserve would not hold, so that such a turn again finds room (:meth:`tail_over`).
A model job: its growth at the average pace plus an average turn (the turn that crosses the
trigger lands anywhere in the last one), and never less than a deterministic job's. The planner
triggers when ``tokens + tokens_ahead >= high watermark`` (watcher.planning.planner.should_plan,
which caps how early). At the job's start :meth:`Lookahead.model_in_time` says whether the model's
digest, at the job's own expected time, would be ready before the context reaches the model's
limit (the high watermark: the reserve above it is the agent's) at the average pace; if not,
the job digests deterministically, in milliseconds: the headroom comes first. A large turn that
comes while the model works is not left to the estimate: the job falls back to the deterministic
digest when the context reaches that limit (watcher.serve.modelrun). Everything is O(1).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

ALPHA = 0.3  # weight of the newest observation
DEFAULT_FAST_JOB_S = 0.5  # before its first deterministic job
BURST_SIGMAS = 2.0  # plan for a turn this many standard deviations above the mean
TURN_GAP_S = 0.25  # growth this soon after the previous growth belongs to the same step
FAR_S = 3600.0  # a deadline never lies further ahead than this (no growth seen, or growth ~0)
RATE_WINDOW_S = 1.0  # growth per second is averaged over windows at least this long
START_MAX_S = 10.0  # growth back to back from the first change on is the history for this long at most
STEP_MAX_S = 1.0  # a step of growth back to back lasts this long at most: a stream is many steps
TAIL_DECAY = 0.95  # the largest turn lately keeps this share a turn (6 000 tokens: 10 turns to 3 600)
HISTORY_SECTIONS = 100  # a history seen at once counts its last this many sections (0.95**100 < 1 %)
TURN_KINDS = frozenset({"user", "assistant", "tool_call", "tool_result", "other"})  # not a system
# prompt nor a digest of an earlier compaction: what the agent's turns add (ipc.sections.KINDS)


@dataclass
class Lookahead:
    turn_tokens: float = 0.0  # EWMA tokens added per growth step
    turn_var: float = 0.0  # exponentially weighted variance of the tokens added per step
    turn_s: float = 0.0  # EWMA seconds between growth steps
    fast_job_s: float = DEFAULT_FAST_JOB_S  # EWMA seconds a deterministic job takes
    throughput: float = 0.0  # EWMA region tokens per second of job time
    steps: int = 0
    jobs: int = 0
    model_jobs: int = 0
    _tokens: int = 0
    _at: float | None = None  # when the context last grew (or was first seen)
    _step_at: float = 0.0  # when the current step began
    _start: float = 0.0  # when the first change was seen
    _step_tokens: int = 0  # tokens the current step has added so far
    _step_dt: float = 0.0  # seconds from the previous step's start to this one's
    tail: float = 0.0  # the largest turn lately: max(turn, tail * TAIL_DECAY) at each step
    _before: tuple[float, float, float, int, float] = (0.0, 0.0, 0.0, 0, 0.0)  # estimates before this step
    rate: float = 0.0  # EWMA tokens of growth per second, over windows of >= RATE_WINDOW_S
    _rate_at: float = 0.0  # when the current window began
    _rate_grown: int = 0  # growth in the current window

    @property
    def seen(self) -> bool:
        """Has any change been observed (the first one is the agent's history, or its start)?"""
        return self._at is not None

    def history(self, sections: Iterable[tuple[str, int]]) -> None:
        """A history seen at once: its sections' (kind, tokens), oldest first. The last
        ``HISTORY_SECTIONS`` of them, of the ``TURN_KINDS``, each count as a turn for the largest
        turn lately, as each append of a history sent turn after turn does. Called before the first
        :meth:`observe`; a section is a turn or part of one, so a streak fades here at least as fast
        as when its turns are seen."""
        for kind, n in deque(sections, maxlen=HISTORY_SECTIONS):
            if kind in TURN_KINDS:
                self._fade_in(n)

    def _fade_in(self, turn: int) -> None:
        """The largest turn lately, after a turn of ``turn`` tokens."""
        self.tail = max(float(turn), self.tail * TAIL_DECAY)

    def observe(self, tokens: int, now: float) -> None:
        """The context now holds ``tokens`` (called on every change; unchanged = no-op)."""
        if self._at is None:
            self._tokens, self._at, self._step_at, self._start = tokens, now, now, now
            return
        grew = tokens - self._tokens
        starting = now - self._start < START_MAX_S
        if grew > 0 and not self.steps and now - self._at < TURN_GAP_S and starting:
            self._fade_in(grew)  # the history's turns are turns it took
            self._tokens, self._at, self._step_at = tokens, now, now  # the history catching up at
            return  # attach (appends back to back from the first one on): the start, not a turn
        if grew > 0:
            self._window(grew, now)
            same = now - self._at < TURN_GAP_S and now - self._step_at < STEP_MAX_S
            if self.steps and same:  # the same step, continued: redo it
                self.turn_tokens, self.turn_var, self.turn_s, self.steps, self.tail = self._before
                self._step_tokens += grew
            else:
                self._before = (self.turn_tokens, self.turn_var, self.turn_s, self.steps, self.tail)
                self._step_tokens, self._step_dt = grew, max(now - self._step_at, 1e-3)
                self._step_at = now
            self._learn(self._step_tokens, self._step_dt)
            self._at = now
        self._tokens = tokens

    def _window(self, grew: int, now: float) -> None:
        """Growth per second, whatever the steps: an agent whose appends come closer together than
        TURN_GAP_S is one long step to the turn estimates, not to this one."""
        if not self._rate_at:
            self._rate_at = self._at or now  # the window opens at the start (the history is not growth)
        self._rate_grown += grew
        span = now - self._rate_at
        if span >= RATE_WINDOW_S:
            new = self._rate_grown / span
            self.rate = _ewma(self.rate, new) if self.rate else new
            self._rate_at, self._rate_grown = now, 0

    def _learn(self, grew: int, dt: float) -> None:
        self._fade_in(grew)
        if self.steps:
            diff = grew - self.turn_tokens
            self.turn_tokens += ALPHA * diff
            self.turn_var = (1 - ALPHA) * (self.turn_var + ALPHA * diff * diff)
            self.turn_s = _ewma(self.turn_s, dt)
        else:
            self.turn_tokens, self.turn_s = grew, dt
        self.steps += 1

    def job_done(self, seconds: float, region_tokens: int, model: bool = True) -> None:
        seconds = max(seconds, 1e-3)
        if model:
            self.model_jobs += 1
        else:
            fast = self.jobs - self.model_jobs
            self.fast_job_s = seconds if not fast else _ewma(self.fast_job_s, seconds)
        rate = region_tokens / seconds
        self.throughput = rate if not self.jobs else _ewma(self.throughput, rate)
        self.jobs += 1

    def _during(self, job_s: float) -> float:
        """Expected growth during ``job_s`` seconds."""
        turns = job_s / self.turn_s if self.turn_s > 0 else 1.0
        return self.turn_tokens * turns

    def _burst(self) -> float:
        """A large turn: mean + BURST_SIGMAS standard deviations."""
        return self.turn_tokens + BURST_SIGMAS * math.sqrt(self.turn_var)

    def largest(self, fit: int) -> int:
        """The agent's largest turn lately, at most ``fit`` (the budget less the low watermark: a
        larger turn finds no room whatever is planned, and is not planned for)."""
        return math.ceil(min(self.tail, fit))

    def tail_over(self, reserve: int, fit: int) -> int:
        """How much of the agent's largest turn lately (:meth:`largest`) the ``reserve`` above the high
        watermark would not hold: how much further under the high watermark to keep the context so
        that such a turn fits the budget again. 0 for an agent whose turns fit its reserve."""
        return max(0, self.largest(fit) - reserve)

    def tokens_ahead(self, model_s: float | None = None, *, reserve: int = 0, fit: int = 0) -> int:
        """How early to plan: the growth expected while a job started now runs. ``model_s``: the
        expected seconds of a model job (queue included); None: a deterministic job, with a large
        turn of margin, and never less than the part of the agent's largest turn lately that the
        ``reserve`` would not hold (:meth:`tail_over`, up to ``fit``; both 0: not counted). A model
        job's is its growth at the average pace plus an average turn (the turn that crosses the
        trigger lands anywhere in the last one), so that at the trigger there is still time for the
        model (:meth:`model_in_time`), and never less than a deterministic job's."""
        over = self.tail_over(reserve, fit)
        if not self.steps:
            return over  # only the history seen: its largest turn
        fast = math.ceil(self._during(self.fast_job_s) + max(self._burst(), over))
        if model_s is None:
            return fast
        return max(fast, math.ceil(self._during(model_s) + self.turn_tokens))

    def model_in_time(self, tokens: int, limit: int, model_s: float) -> bool:
        """Would a model job of ``model_s`` seconds, started at ``tokens``, be ready before the
        context reaches ``limit`` (the high watermark) at the average pace? If not, the job digests
        deterministically. No margin beyond the average pace: a turn that reaches the limit while
        the model works cuts the model off (watcher.serve.modelrun), so a wrong guess costs the
        model's time, never the agent's."""
        return tokens + (self._during(model_s) if self.steps else 0.0) < limit

    def seconds_until(self, tokens: int, limit: int) -> float:
        """Seconds until a context of ``tokens`` reaches ``limit`` at the average pace (the time a
        model job started now has; :meth:`model_in_time` is ``model_s`` below it). No growth seen:
        unbounded (``math.inf``)."""
        if tokens >= limit:
            return 0.0
        if not self.steps or self.turn_tokens <= 0:
            return math.inf
        return (limit - tokens) / self.turn_tokens * self.turn_s

    def deadline(self, tokens: int, limit: int, now: float, margin: bool = True, reserve: int = 0) -> float:
        """When the agent's next LLM call is expected not to fit ``limit`` (its budget): the
        monotonic time of the turn that takes the context over it, with a large turn of margin
        (``margin``; else an average turn). A context already over ``limit`` had its deadline when
        it last grew. No growth seen yet: ``FAR_S`` from now (the scheduler's aging still serves
        it). The scheduler serves the earliest deadline first (watcher.serve.scheduler, with the
        margin); a job degrades when it cannot be done before it (watcher.serve.degrade, without:
        the turn the agent is expected to take, not a pessimistic one). ``reserve``: the least
        margin, with ``margin`` (the scheduler's order passes the tokens above the high watermark:
        the reserve is the agent's, so a context in it is due at its next turn however small its
        turns have been; a turn larger than its recent ones is what the reserve is for). An agent
        whose history alone was seen (no turn yet: when its first comes is not known) is due when
        its history grew if a turn of ``reserve`` would take it over ``limit``, so that an agent
        attaching near its budget is compacted first; else ``FAR_S`` from now."""
        if tokens >= limit:
            return self._at if self._at is not None else now
        if not self.steps or self.turn_tokens <= 0 or self._at is None:
            if margin and reserve and self._at is not None and tokens + reserve > limit:
                return self._at  # only its history seen, and its first turn may not fit: due now
            return now + FAR_S
        ahead = max(self._burst(), reserve) if margin else 0.0  # the last turn: large, or average
        room = max(0.0, limit - tokens - ahead)
        by_turns = self._at + self.turn_s * (1 + math.floor(room / self.turn_tokens))
        if self.streaming and now - self._at < TURN_GAP_S and self.rate > 0:
            # a stream (still flowing) is one step after another to the turn estimates, and each
            # append moves the step's end: a step away, however close the context is to the limit.
            # At its measured growth per second instead.
            by_turns = min(by_turns, now + room / self.rate)
        return min(by_turns, now + FAR_S)

    @property
    def streaming(self) -> bool:
        """Does the agent append closer together than TURN_GAP_S, its steps back to back (each
        ended by STEP_MAX_S, not by a pause)? An agent's turns are LLM calls seconds apart."""
        return 0 < self.turn_s < STEP_MAX_S + TURN_GAP_S

    def snapshot(self) -> dict[str, float]:
        return {
            "tokens_per_turn": round(self.turn_tokens, 1),
            "seconds_per_turn": round(self.turn_s, 3),
            "model_jobs": self.model_jobs,
            "fast_job_seconds": round(self.fast_job_s, 3),
            "summarizer_tokens_per_s": round(self.throughput, 1),
            "tokens_ahead": self.tokens_ahead(),  # a deterministic job's
            "tokens_per_s": round(self.rate, 1),
            "largest_turn_tokens": round(self.tail),
        }


def _ewma(old: float, new: float) -> float:
    return (1 - ALPHA) * old + ALPHA * new
