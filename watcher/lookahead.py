"""Look-ahead: start a compaction early enough that its digest is ready before it is needed.

Per agent, two running estimates (exponentially weighted moving averages):

* **growth**: tokens per turn and seconds per turn, from the context growing (every SYNCED change
  that adds tokens is one growth step; a shrink, a compaction applied, only moves the baseline);
* **job time**: seconds from planning a compaction to its proposal being ready (queueing behind
  other agents' jobs included), and the summarizer's throughput in region tokens per second.

:meth:`Lookahead.tokens_ahead` is how much the context is expected to grow while a job started now
runs, plus one turn (the agent applies a proposal between two turns). The planner triggers when
``tokens + tokens_ahead >= high watermark`` (watcher.planner.should_plan). Everything is O(1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALPHA = 0.3  # weight of the newest observation
DEFAULT_JOB_S = 5.0  # before the first job of an agent finishes: a gist on 2 cores plus slack
BURST_SIGMAS = 2.0  # tool output comes in bursts: plan for a turn this many deviations above the mean


@dataclass
class Lookahead:
    turn_tokens: float = 0.0  # EWMA tokens added per growth step
    turn_var: float = 0.0  # exponentially weighted variance of the tokens added per step
    turn_s: float = 0.0  # EWMA seconds between growth steps
    job_s: float = DEFAULT_JOB_S  # EWMA seconds a job takes
    throughput: float = 0.0  # EWMA region tokens per second of job time
    steps: int = 0
    jobs: int = 0
    _tokens: int = 0
    _at: float | None = None

    def observe(self, tokens: int, now: float) -> None:
        """The context now holds ``tokens`` (called on every change; unchanged = no-op)."""
        if self._at is None:
            self._tokens, self._at = tokens, now
            return
        grew = tokens - self._tokens
        if grew > 0:
            dt = max(now - self._at, 1e-3)
            if self.steps:
                diff = grew - self.turn_tokens
                self.turn_tokens += ALPHA * diff
                self.turn_var = (1 - ALPHA) * (self.turn_var + ALPHA * diff * diff)
            else:
                self.turn_tokens = grew
            self.turn_s = dt if not self.steps else _ewma(self.turn_s, dt)
            self.steps += 1
            self._at = now
        self._tokens = tokens

    def job_done(self, seconds: float, region_tokens: int) -> None:
        seconds = max(seconds, 1e-3)
        self.job_s = seconds if not self.jobs else _ewma(self.job_s, seconds)
        rate = region_tokens / seconds
        self.throughput = rate if not self.jobs else _ewma(self.throughput, rate)
        self.jobs += 1

    def tokens_ahead(self) -> int:
        """Expected growth while a job started now runs, plus a large turn (mean + BURST_SIGMAS
        standard deviations): the one that arrives before the agent can apply the proposal."""
        if not self.steps:
            return 0
        turns = self.job_s / self.turn_s if self.turn_s > 0 else 1.0
        burst = self.turn_tokens + BURST_SIGMAS * math.sqrt(self.turn_var)
        return math.ceil(self.turn_tokens * turns + burst)

    def snapshot(self) -> dict[str, float]:
        return {
            "tokens_per_turn": round(self.turn_tokens, 1),
            "seconds_per_turn": round(self.turn_s, 3),
            "job_seconds": round(self.job_s, 3),
            "summarizer_tokens_per_s": round(self.throughput, 1),
            "tokens_ahead": self.tokens_ahead(),
        }


def _ewma(old: float, new: float) -> float:
    return (1 - ALPHA) * old + ALPHA * new
