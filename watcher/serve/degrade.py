"""Graceful degradation under load, per agent, and which digest method each job used.

When a compaction job starts, its agent's **slack** is the time until its next LLM call is expected
not to fit the budget (watcher.planning.lookahead.Lookahead.deadline, at the agent's average turn;
negative when the context is over the budget already: its call waits for this job. A next turn
expected earlier that has not come yet says nothing about when it will: such a job is not late).
The job's expected time is measured: for a job that holds the model lane, the expected time of
its model digest (watcher.serve.modelcost: the tokens the model will read over the measured prefill
rate, plus the measured overhead), else the measured time of deterministic jobs (:class:`JobTimes`:
an exponentially weighted mean from the job's start to its proposal being ready, on this machine,
at this load). If the job cannot be done in time while other agents wait (at least :data:`LOADED`:
a load, not one fast agent) and the agent's context is over its high watermark (at risk: a
compaction started early by the look-ahead has its reserve left), the agent degrades to a cheaper
strategy:

=====  ===============  =====================================================================
level  name             what the agent's jobs do
=====  ===============  =====================================================================
0      ``normal``       the planner's region; the model's digest when the job holds the model
                        lane (watcher.serve.scheduler), else the deterministic digest
1      ``deterministic`` the planner's region, the deterministic digest (no model for it)
2      ``masking``      old tool outputs become placeholders (no scoring, no digest) ...
3      ``headtail``     ... or, when masking cannot bring the context under the high watermark,
                        the oldest foldable region becomes its head and tail (summarizer.headtail)
=====  ===============  =====================================================================

An agent's level follows its jobs: a later job that finds enough time (or no load) raises it
back up, and when the scheduler's queue drains every degraded agent recovers to ``normal``. Each
change is said four ways: the agent's STATUS (``degraded``), a structlog line and an MQTT event
(``agent_degraded`` / ``agent_recovered``), and the Prometheus series (degradations by level, agents
degraded). Only the planning policies that plan ahead (``optimistic``, ``recency``) degrade; the
replay baselines act as they always do.

:class:`DigestMethods` counts the method of every proposal built (``model``, ``deterministic``,
``masking``, ``headtail``) and, for a daemon with a model, why a job did not use it: ``deadline``
(its digest would come too late: watcher.serve.modelcost), ``late`` (it was cut off: the context
reached the model's limit first, watcher.serve.modelrun), ``degraded`` (the agent is degraded),
``busy`` (the model lane was taken or too many agents waited), ``too_small`` (nothing to rank or
gist), ``not_shown`` (the model ranked lines, none the rules would not show made the digest),
``rejected`` (the gist failed its check or did not pay), ``model_failed`` (the model failed or is
in back-off), ``no_model``, ``policy`` (the agent's planner does not digest: the ``masking`` baseline).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Final

from ipc.sections import Section
from summarizer.digest import Digest
from watcher.observe import logs
from watcher.observe.digests import LEVELS, METHODS, SKIP_REASONS
from watcher.planning.baselines import MASK_MIN_TOKENS, MaskPlan, oldest_region, plan_masking
from watcher.planning.planner import Plan, Watermarks
from watcher.serve.session import Session

log = logs.get("compactd.degrade")

NORMAL, DETERMINISTIC, MASKING, HEADTAIL = range(4)
# before the first job of a method; "model" is only reported (a model job's estimate is ModelCost's)
DEFAULT_JOB_S: Final = {"model": 0.0, "deterministic": 0.5, "masking": 0.05, "headtail": 0.05}
ALPHA: Final = 0.3  # weight of the newest job time
MARGIN: Final = 1.5  # a strategy is used only if its expected time x MARGIN fits in the slack
LOADED: Final = 2  # agents waiting (besides the job starting) from which a job may degrade its agent
PLACEHOLDER_TOKENS: Final = MASK_MIN_TOKENS  # what a masked output still costs (a one-line placeholder)


class JobTimes:
    """Seconds a job takes from its start to its proposal, per digest method (EWMA)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict(DEFAULT_JOB_S)
        self.count: dict[str, int] = dict.fromkeys(METHODS, 0)

    def expect(self, method: str) -> float:
        return self.seconds[method]

    def record(self, method: str, seconds: float) -> None:
        if method not in self.seconds:
            return
        n = self.count[method]
        self.seconds[method] = seconds if not n else (1 - ALPHA) * self.seconds[method] + ALPHA * seconds
        self.count[method] = n + 1


def level_for(slack_s: float, times: JobTimes, model_s: float | None) -> int:
    """The level a job started now needs: ``normal`` if its usual digest (the model's, expected to
    take ``model_s`` seconds, when it holds the model lane; None: it does not, or the model's time
    is not measured yet) fits in ``slack_s``, else ``deterministic`` if that fits, else ``masking``
    (which falls back to ``headtail`` when masking is not enough)."""
    usual = times.expect("deterministic") if model_s is None else model_s
    if usual * MARGIN <= slack_s:
        return NORMAL
    if times.expect("deterministic") * MARGIN <= slack_s:
        return DETERMINISTIC
    return MASKING


DEEP_SAFETY: Final = 2.0  # a loaded job's bite lasts this many of the agent's measured job cycles
DEEP_FLOOR: Final = 0.3  # ... but folds the context down to no less than this share of its budget


def deeper(marks: Watermarks, trigger: int, rate: float, cycle_s: float, waiting: int) -> Watermarks:
    """The watermarks a job plans to. Normally the agent's own. Under load (at least
    :data:`LOADED` other agents waiting), when the room between the trigger and the low watermark
    would fill before the agent's next job could be done (its growth ``rate`` in tokens/s over
    ``cycle_s``, the measured time from submitting a job to its proposal, queue included,
    :data:`DEEP_SAFETY` times), the job folds deeper: to the trigger less that growth, never below
    :data:`DEEP_FLOOR` of the budget. Fewer, bigger jobs: when more agents grow than the machine
    can compact in small bites one by one, a bite per queue cycle keeps each under its budget.
    An agent that grows slowly for its queue's pace (every replayed trajectory at 2 s a turn) never
    folds deeper than it would alone."""
    need = rate * cycle_s * DEEP_SAFETY
    if waiting < LOADED or need <= trigger - marks.low:
        return marks
    low = max(int(marks.budget * DEEP_FLOOR), int(trigger - need))
    if low >= marks.low:
        return marks
    return replace(marks, low_ratio=low / marks.budget)


def fast_plan(
    sections: Sequence[Section], marks: Watermarks, fresh: int
) -> tuple[int, Plan | MaskPlan | None]:
    """A degraded job's plan (O(n), no scoring): old tool outputs masked, if that brings the context
    under the high watermark (level ``masking``); else the oldest foldable region, to be digested
    to its head and tail (level ``headtail``); else masking what can be masked, or None."""
    total = sum(s.tokens for s in sections)
    masked = plan_masking(sections, marks, fresh, keep_turns=fresh, over=0)
    if masked is not None and total - masked.tokens + PLACEHOLDER_TOKENS * len(masked.masked) < marks.high:
        return MASKING, masked
    region = oldest_region(sections, marks, fresh, "headtail")
    if region is not None:
        return HEADTAIL, region
    return MASKING, masked


def model_note(digest: Digest) -> str:
    """Why a digest written with the model's summarizer is not the model's (``""`` if it is)."""
    if digest.method == "model":
        return ""
    if digest.generations:
        return "rejected"
    if digest.scored_tokens or digest.ranked_ahead:  # ranked now or ahead (watcher.serve.readahead)
        return "not_shown"
    return "model_failed" if digest.gist_rejected else "too_small"


class DigestMethods:
    """Counts of the digest methods used and of the reasons the model was skipped."""

    def __init__(self) -> None:
        self.methods: dict[str, int] = dict.fromkeys(METHODS, 0)
        self.skipped: dict[str, int] = dict.fromkeys(SKIP_REASONS, 0)
        self.degradations: dict[str, int] = dict.fromkeys(LEVELS[1:], 0)
        self.recoveries = 0

    def count(self, method: str, skipped: str) -> None:
        self.methods[method] = self.methods.get(method, 0) + 1
        if skipped:
            self.skipped[skipped] = self.skipped.get(skipped, 0) + 1

    def stats(self, times: JobTimes, degraded_agents: int) -> dict[str, Any]:
        """STATUS ``daemon.digest_methods``."""
        total = sum(self.methods.values())
        return {
            **self.methods,
            "model_share": round(self.methods["model"] / total, 4) if total else None,
            "model_skipped": dict(self.skipped),
            "degradations": dict(self.degradations),
            "recoveries": self.recoveries,
            "agents_degraded": degraded_agents,
            "job_seconds": {m: round(s, 4) for m, s in times.seconds.items()},
        }


class Degrader:
    """Per-agent levels (``Session.degrade``): raised by a job that cannot be done in time, reset
    when the queue drains."""

    def __init__(self, emit: Callable[..., None]) -> None:
        """``emit``: the hub's ``emit(kind, agent, **fields)`` (log lines are written here)."""
        self.emit = emit
        self.times = JobTimes()
        self.methods = DigestMethods()
        self.degraded: dict[str, Session] = {}  # agent -> its session, while its level is above 0

    def need(self, state: Session, slack_s: float, model_s: float | None, waiting: int) -> int:
        """The level of a job starting now for ``state``'s agent (``model_s``: its model digest's
        expected seconds if it holds the model lane, see :func:`level_for`), with ``waiting`` other agents in
        the queue, and the agent's level changed to it (said when it changes). Only under load (at
        least :data:`LOADED` waiting) and with the agent's context over its high watermark (its
        reserve is being used: the estimate of its next turn is not all that stands between it and
        an overflow) can a job that cannot be done in ``slack_s`` degrade its agent; else it only
        skips the model when the model would be late (not a degradation: a cheaper job would make
        no one else sooner, and it costs quality). A job that finds enough time recovers its
        agent: the load has fallen for it."""
        need = level_for(slack_s, self.times, model_s)
        if waiting < LOADED or state.ctx.tokens < state.marks.high:
            need = min(need, DETERMINISTIC)
            if need < state.degrade:
                self.lower_to(state, need)
            return need
        if need == MASKING and state.degrade == HEADTAIL:
            need = HEADTAIL  # one tier: the plan says which of the two (watcher.serve.jobs)
        if need > state.degrade:
            self.raise_to(state, need, slack_s)
        elif need < state.degrade:
            self.lower_to(state, need)
        return need

    def raise_to(self, state: Session, level: int, slack_s: float, reason: str = "deadline") -> None:
        """Degrade to ``level``; ``reason``: ``deadline`` (the job, when it started, could not be done
        in time) or ``queue`` (its turn in the queue would have come too late: an express job,
        watcher.serve.scheduler)."""
        if level <= state.degrade:
            return
        state.degrade = level
        self.degraded[state.agent] = state
        name = LEVELS[level]
        self.methods.degradations[name] += 1
        expected = {"deterministic": round(self.times.expect("deterministic"), 3)}
        fields = {"level": name, "slack_s": round(slack_s, 3), "reason": reason}
        log.warning("agent_degraded", agent=state.agent, expected_s=expected, **fields)
        self.emit("agent_degraded", state.agent, **fields)

    def lower_to(self, state: Session, level: int) -> None:
        """Back up to ``level`` (``normal``: recovered)."""
        was = LEVELS[state.degrade]
        state.degrade = level
        if level == NORMAL:
            self.degraded.pop(state.agent, None)
        self.methods.recoveries += 1
        log.info("agent_recovered", agent=state.agent, level=LEVELS[level], level_was=was)
        self.emit("agent_recovered", state.agent, level=LEVELS[level], level_was=was)

    def recover_all(self) -> None:
        """The queue drained: every degraded agent back to ``normal``."""
        for _, state in sorted(self.degraded.items()):
            self.lower_to(state, NORMAL)
        self.degraded.clear()

    def stats(self) -> dict[str, Any]:
        return self.methods.stats(self.times, len(self.degraded))
