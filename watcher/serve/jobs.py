"""Compaction jobs: when an agent's session needs one, its plan (in a thread, on the mirror as it
is), the digest (model or deterministic lane: watcher.serve.scheduler), and the proposal sent.

One job per agent at a time, queued earliest deadline first by the scheduler; the session's policy
(watcher.planning.policies) says when to act and what to fold, unless the job cannot be done in
time and the agent is degraded to a cheaper strategy (watcher.serve.degrade)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from typing import Any

from ipc.context import Context
from ipc.sections import Section
from summarizer.digest import Item, Summarizer
from summarizer.headtail import HeadTailSummarizer
from watcher.observe import logs
from watcher.planning.baselines import MaskPlan
from watcher.planning.planner import Plan, Watermarks, early_cap
from watcher.planning.policies import PlanInputs, Planned
from watcher.serve import records
from watcher.serve.compactor import build
from watcher.serve.degrade import (
    DETERMINISTIC,
    MARGIN,
    MASKING,
    NORMAL,
    Degrader,
    deeper,
    fast_plan,
)
from watcher.serve.hub import Hub
from watcher.serve.modelcost import MIN_MODEL_TOKENS, ModelCost
from watcher.serve.modelrun import digest_in_time
from watcher.serve.scheduler import DETERMINISTIC_LANES, Fallback
from watcher.serve.session import Pending, Session, hurry_at, prepare_plan, ranks_of
from watcher.store.crashpoints import crashpoint

log = logs.get("compactd.server")

PLAN_ATTEMPTS = 3  # plans in a thread on a snapshot the mirror changed under, before one on the loop
LANE_WAIT_MAX_S = 10.0  # a job whose model lane was busy waits for it this long at most (wait_for_lane)


def items_of(state: Session, p: Plan) -> list[Item]:
    """The summarizer's items of ``p``'s region as the mirror holds it now, with the model's scores of
    their lines where it read them ahead (watcher.serve.readahead)."""
    return [
        Item(s.id, s.kind, s.text, s.tokens, ranks_of(state, s))
        for sid in p.ids
        if (s := state.ctx.get(sid)) is not None
    ]


def unchanged(snapshot: Sequence[Section], ctx: Context) -> bool:
    """Does the mirror still hold exactly ``snapshot`` (the same section objects, in order)?"""
    return len(snapshot) == len(ctx) and all(a is b for a, b in zip(snapshot, ctx, strict=False))


class Jobs:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.degrader = Degrader(hub.emit)
        self.cost = ModelCost()  # a model job's expected seconds, measured (warm-up, then jobs)
        hub.scheduler.on_idle = self.degrader.recover_all  # the queue drained: load has fallen

    def maybe_compact(self, state: Session) -> None:
        la = state.lookahead
        if not la.seen:  # the first change: the history at once (a SNAPSHOT), or its first append
            la.history((s.kind, s.tokens) for s in state.ctx)
        la.observe(state.ctx.tokens, time.monotonic())  # O(1): growth per turn
        if state.hurry is not None and state.ctx.tokens >= state.hurry_at:
            state.hurry.set()  # the model's digest is late: its job digests deterministically now
        if state.policy != "auto" or state.job_running or state.pending or not state.synced:
            return
        if state.ctx.tokens <= self.trigger(state):
            state.stuck_reported = False
            state.stuck_tokens = 0
            return
        if state.stuck_tokens and state.ctx.tokens < state.stuck_tokens + state.marks.budget // 50:
            return  # nothing foldable was left; wait until the context has grown before trying again
        state.job_running = True  # queued or running (watcher.serve.scheduler); planned when its turn comes
        state.job_submitted = time.monotonic()
        cheap = Fallback(lambda: self.run_express(state), lambda: self.express_due(state))
        plans_ahead = state.planner.plans_ahead  # the baselines compact as they always do
        self.hub.scheduler.submit(
            state.agent, lambda: self.run(state), lambda: self.deadline(state), cheap if plans_ahead else None
        )

    @staticmethod
    def deadline(state: Session) -> float:
        """The scheduler's order: when the agent's next call is expected not to fit its budget, with
        a large turn of margin, and never less than the reserve above its high watermark nor the
        agent's largest turn lately (up to what a plan can make room for: Lookahead.largest); so a
        context already in its reserve is due at its next turn (Lookahead.deadline), and so is one
        that a turn as large as its largest lately would take over its budget."""
        marks, la = state.marks, state.lookahead
        least = max(marks.reserve_tokens, la.largest(marks.fit_tokens))
        return la.deadline(state.ctx.tokens, marks.budget, time.monotonic(), reserve=least)

    @staticmethod
    def due(state: Session) -> float:
        """When the agent's next call is expected not to fit its budget, with a large turn of
        margin: when its waiting job must be done at the latest (:meth:`express_due`)."""
        return state.lookahead.deadline(state.ctx.tokens, state.marks.budget, time.monotonic())

    @staticmethod
    def express_due(state: Session) -> float:
        """When the agent's waiting job must be done at the latest, or its fallback runs now
        (watcher.serve.scheduler, Express jobs): its deadline. A deadline already past while the
        context is under its budget is a turn later than expected (when it comes is not known; the
        rule of :meth:`level`): not a reason to degrade it (``math.inf``)."""
        due = Jobs.due(state)
        return math.inf if due < time.monotonic() and state.ctx.tokens < state.marks.budget else due

    def level(self, state: Session) -> int:
        """The degradation level of the job starting now (watcher.serve.degrade), from the time
        left until the agent's next turn is expected not to fit; decided before the job's first
        await, when the scheduler has given it its lane."""
        if not state.planner.plans_ahead:  # the baselines compact as they always do
            return NORMAL
        now, tokens, budget = state.job_started, state.ctx.tokens, state.marks.budget
        left = state.lookahead.deadline(tokens, budget, now, margin=False) - now
        sched = self.hub.scheduler
        if left < 0 and tokens < budget:  # its next turn is later than expected: when is not known
            left = self.degrader.times.expect("deterministic") * MARGIN  # (past: its call waits now)
        # the smallest model job: a job reads what its time buys (model_in_time decides how much)
        model_s = self.cost.expect(MIN_MODEL_TOKENS) if sched.holds_model() else None
        level = self.degrader.need(state, left, model_s, sched.depth)
        if level == DETERMINISTIC and not state.degrade and not self.hub.cfg.compaction.lookahead:
            return NORMAL  # not degraded, only late: without look-ahead the model is not skipped
        return level

    def trigger(self, state: Session) -> int:
        """Compaction is considered once the context holds more than this many tokens."""
        return state.planner.trigger(state.marks, self.ahead(state))

    def cycle_s(self, state: Session) -> float:
        """Seconds until a job submitted now is expected to be done: the agent's own measured
        cycle (submit to proposal, queue included), the queue's measured wait, or the queue in front
        of it now at the measured job time, whichever is longest."""
        sched = self.hub.scheduler
        queue_s = sched.depth * self.degrader.times.expect("deterministic") / DETERMINISTIC_LANES
        return max(state.lookahead.fast_job_s, sched.wait_s, queue_s)

    def ahead(self, state: Session) -> int:
        """Tokens the context is expected to grow by while a digest is written (watcher.planning.lookahead).

        Never less than the part of the agent's largest turn lately that its reserve would not hold
        (Lookahead.tail_over): a streak of large tool outputs is planned for, so that the next one
        fits the budget. With a model, as much as a model digest needs, if planning that early is allowed (the
        planner caps how early, :func:`watcher.planning.planner.early_cap`); else the digest will be
        deterministic anyway (:meth:`summarizer_for`), so plan only as early as that needs: a
        later plan has more turns to choose what to fold from."""
        if not self.hub.cfg.compaction.lookahead:
            return 0
        marks, la = state.marks, state.lookahead
        reserve, fit = marks.reserve_tokens, marks.fit_tokens  # for the largest turn lately
        model_s = self.model_s()
        if model_s is not None:
            ahead = la.tokens_ahead(model_s, reserve=reserve, fit=fit)
            if ahead <= early_cap(marks):
                return ahead
        return la.tokens_ahead(reserve=reserve, fit=fit)

    def model_s(self) -> float | None:
        """The expected seconds of a model job planned now: its measured cost
        (watcher.serve.modelcost, at the mean input so far) plus the measured queue wait; None
        without a model or before its first measurement."""
        if self.hub.summarizer.engine is None:
            return None
        expect = self.cost.expect()
        return None if expect is None else expect + self.hub.scheduler.wait_s

    def summarizer_for(self, state: Session, p: Planned) -> tuple[Summarizer, str]:
        """(summarizer, why not the model): the model (through the scheduler's lane) when its
        digest, at this job's expected time (:meth:`model_in_time`), would be ready before the
        context reaches the model's limit and the agent is not degraded; else a
        deterministic digest now: the headroom comes first (DESIGN: never worse). A degraded job's
        head/tail region gets the head/tail digest (summarizer.headtail)."""
        hub = self.hub
        sched = hub.scheduler
        has_model = hub.summarizer.engine is not None
        why = "degraded" if has_model else "no_model"
        if isinstance(p, MaskPlan) and state.job_level < MASKING:  # the masking baseline
            return sched.deterministic(hub.summarizer), "policy" if has_model else why
        if isinstance(p, MaskPlan) or p.strategy == "headtail":
            det = sched.deterministic(hub.summarizer)  # gives the model lane back
            if isinstance(p, MaskPlan):
                return det, why  # counts the placeholders' tokens
            return HeadTailSummarizer(None, count=hub.summarizer.count), why
        if state.job_level >= DETERMINISTIC:
            return sched.deterministic(hub.summarizer), why if state.degrade or not has_model else "deadline"
        if self.budgets_model(state) and has_model and not self.model_in_time(state, p):
            return sched.deterministic(hub.summarizer), "deadline"
        chosen = sched.pick(hub.summarizer)
        if not has_model:
            return chosen, why
        if chosen is hub.summarizer:
            hub.read_ahead.preempt()  # the engine is this job's now
            return chosen, ""
        return chosen, "busy"

    async def wait_for_lane(self, state: Session, p: Planned, det: Summarizer) -> tuple[Summarizer, str]:
        """A job that found the model lane held by another job waits for it, for as long as its own
        model job would still be ready before the model's limit (:meth:`lane_wait_s`), rather than
        digest without the model at once: with four agents at a turn every 2 s, one digest in ten
        went without the model this way (``busy``) while its agent had seconds to spare. Once it
        has the lane, the job is sized again for the time left (:meth:`model_in_time`); no time
        left: the lane goes back and the job digests deterministically (``det``), still ``busy``.
        A turn that takes the context to the model's limit ends the wait (``Session.hurry``)."""
        hub, sched = self.hub, self.hub.scheduler
        if not isinstance(p, Plan) or not self.budgets_model(state) or state.job_level >= DETERMINISTIC:
            return det, "busy"
        wait = self.lane_wait_s(state)
        if wait <= 0:
            return det, "busy"
        with hurry_at(state, self.model_limit(state)) as hurry:  # a turn to the limit ends the wait
            won = await sched.wait_model(wait, hurry)
        if not won:
            return det, "busy"
        if hub.agents.get(state.agent) is not state or not self.model_in_time(state, p):
            return sched.deterministic(hub.summarizer), "busy"
        sched.took_model()
        hub.read_ahead.preempt()  # the engine is this job's now
        return hub.summarizer, ""

    def lane_wait_s(self, state: Session) -> float:
        """How long a job may wait for the model lane: the seconds until its context reaches the
        model's limit at the agent's pace, less its model job's expected time (as measured:
        watcher.serve.modelcost; none measured yet: no wait), at most :data:`LANE_WAIT_MAX_S`."""
        expect = self.cost.expect(state.model_input)
        if expect is None:
            return 0.0
        left = state.lookahead.seconds_until(state.ctx.tokens, self.model_limit(state))
        return min(LANE_WAIT_MAX_S, left - expect)

    def budgets_model(self, state: Session) -> bool:
        """Is the model's time budgeted (and a late model cut off) for this agent's jobs? With the
        look-ahead, for the planners that plan ahead (a baseline digests as it would: reactive
        waits)."""
        return state.planner.plans_ahead and self.hub.cfg.compaction.lookahead

    def model_in_time(self, state: Session, p: Plan) -> bool:
        """Would a model digest of ``p`` be ready in time (watcher.planning.lookahead)? Its expected
        seconds: the tokens the model will read for this region over the measured rate
        (watcher.serve.modelcost); not measured yet: tried (the job falls back if it is late). When
        the whole job would not be ready in time, it reads only what the time it has buys
        (``state.model_tokens``: the summarizer scores at most that many tokens): in time if that
        is at least :data:`watcher.serve.modelcost.MIN_MODEL_TOKENS`."""
        summ = self.hub.summarizer
        items = items_of(state, p)
        state.model_tokens = None
        state.model_input = summ.model_input_tokens(items, p.target_tokens)
        expect = self.cost.expect(state.model_input)
        if expect is None:
            return True
        limit, la = self.model_limit(state), state.lookahead
        in_time = la.model_in_time(state.ctx.tokens, limit, expect)
        whole = state.model_input
        if not in_time:  # a smaller job: score what the time until the limit buys
            left = la.seconds_until(state.ctx.tokens, limit)
            small = self.cost.smaller_job(left, lambda n: summ.model_input_tokens(items, p.target_tokens, n))
            if small is not None:
                state.model_tokens, state.model_input = small
                expect = self.cost.expect(state.model_input) or expect
                in_time = True
        log.info(
            "model_budget",
            agent=state.agent,
            input_tokens=state.model_input,
            whole_input_tokens=whole,
            model_tokens=state.model_tokens,
            expected_s=round(expect, 3),
            tokens=state.ctx.tokens,
            limit=limit,
            tokens_per_turn=round(la.turn_tokens),
            seconds_per_turn=round(la.turn_s, 3),
            in_time=in_time,
        )
        return in_time

    @staticmethod
    def model_limit(state: Session) -> int:
        """Tokens the context may reach while the model works: the high watermark. The reserve above
        it is the agent's, never the model's: letting the model work into it (while a large turn
        still fit the budget) doubled the model's digests (15 % vs 9 %) but put 3.3 % of replay
        calls over the high watermark instead of 1.2 % (docs/BENCHMARKS.md, "The model at the
        defaults")."""
        return state.marks.high

    def wanted(self, state: Session) -> bool:
        """Is a compaction of the agent's mirror as it is now still wanted?"""
        return (
            self.hub.agents.get(state.agent) is state
            and state.policy == "auto"
            and not state.pending
            and state.synced
            and state.ctx.tokens > self.trigger(state)
        )

    def plan_on(
        self, state: Session, sections: list[Section], marks: Watermarks, growth: int
    ) -> Planned | None:
        """The plan for ``sections`` (a snapshot of the mirror) down to ``marks``: pure but for the
        agent's scorer cache, which only this agent's job (one at a time: watcher.serve.scheduler)
        touches."""
        c = self.hub.cfg.compaction
        inputs = PlanInputs(c.fresh_turns, growth, state.scorer, c.cache_weight)
        return state.planner.plan(sections, marks, inputs)

    def marks_for(self, state: Session) -> Watermarks:
        """The watermarks this job plans to: the agent's, or deeper under load for a planner that
        plans ahead (watcher.serve.degrade.deeper; the baselines compact as they always do)."""
        if not state.planner.plans_ahead:
            return state.marks
        waiting = self.hub.scheduler.depth
        rate, cycle = state.lookahead.rate, self.cycle_s(state)
        marks = deeper(state.marks, self.trigger(state), rate, cycle, waiting)
        if marks is not state.marks:
            state.deep_plans += 1
        return marks

    async def plan(self, state: Session) -> tuple[bool, Planned | None]:
        """(wanted, plan): the plan of the mirror as it is when this returns, computed in a thread
        (a plan costs 3-10 ms of CPU with ~150 sections; on the loop it would hold up every agent's
        deltas; in a thread the loop waits at most a GIL switch interval for it). On a snapshot of
        the mirror: if a delta changed the mirror meanwhile, planned again, and after
        :data:`PLAN_ATTEMPTS` on the loop, so that the plan is always that of the mirror it is built
        on. ``wanted`` False: the job is not, or no longer, wanted (:meth:`wanted`)."""
        if not self.wanted(state):
            return False, None
        marks = self.marks_for(state)  # once per job, on the loop (the queue's state is read here)
        state.planning = True  # the packer leaves the mirror's objects as they are meanwhile
        try:
            for _ in range(PLAN_ATTEMPTS):
                sections = list(state.ctx)
                p = await asyncio.to_thread(self.plan_on, state, sections, marks, self.ahead(state))
                if not self.wanted(state):
                    return False, None
                if unchanged(sections, state.ctx):
                    return True, p
            return True, self.plan_on(state, list(state.ctx), marks, self.ahead(state))
        finally:
            state.planning = False

    async def run(self, state: Session) -> None:
        """The agent's turn in the scheduler: plan on the mirror as it is now, then compact (a
        degraded agent: masking or head/tail, planned in O(n) on the loop)."""
        state.job_started = time.monotonic()
        state.job_level = self.level(state)
        if state.job_level >= MASKING:
            await self.run_degraded(state)
            return
        if state.planner.needs_features:
            # features of new sections, in the worker process (or here in slices: others go on)
            await prepare_plan(state, remote=self.hub.scheduler.pool.features)
        wanted, p = await self.plan(state)
        if not wanted:
            state.job_running = False
            return
        if p is None:
            state.job_running = False
            if state.ctx.tokens < state.marks.high:  # early (look-ahead): not a headroom problem yet
                state.stuck_tokens = state.ctx.tokens
                return
            self.stuck(state, "only anchors and small regions are left")
            return
        if isinstance(p, Plan):
            log.info(
                "compaction_planned",
                agent=state.agent,
                strategy=p.strategy,
                tokens=state.ctx.tokens,
                need=p.need,
                region_tokens=p.tokens,
                sections=len(p.ids),
                value=p.value,
                invalidated_prefix_tokens=p.invalidated_prefix_tokens,
                tokens_ahead=self.ahead(state),
                queued_s=round(time.monotonic() - state.job_submitted, 3),
            )
        await self.compact(state, p)

    async def run_express(self, state: Session) -> None:
        """The agent's job would be done after its deadline at its place in the queue
        (watcher.serve.scheduler, Express jobs): the cheap strategy now instead (masking, or head and
        tail), the agent degraded and said so."""
        state.job_started = now = time.monotonic()
        state.job_level = MASKING
        if not self.wanted(state):
            state.job_running = False
            return
        self.degrader.raise_to(state, MASKING, self.due(state) - now, reason="queue")
        await self.run_degraded(state)

    async def run_degraded(self, state: Session) -> None:
        if not self.wanted(state):
            state.job_running = False
            return
        level, p = fast_plan(list(state.ctx), state.marks, self.hub.cfg.compaction.fresh_turns)
        if p is None:
            state.job_running = False
            self.stuck(state, "degraded: nothing to mask and no region to fold")
            return
        self.degrader.raise_to(state, level, 0.0)  # masking was not enough: head and tail
        log.info(
            "compaction_planned",
            agent=state.agent,
            strategy=p.strategy if isinstance(p, Plan) else "masking",
            tokens=state.ctx.tokens,
            region_tokens=p.tokens,
            degraded=level,
        )
        await self.compact(state, p)

    def stuck(self, state: Session, why: str) -> None:
        """Headroom cannot be restored now: say so once, and do not loop."""
        state.stuck_tokens = state.ctx.tokens
        if not state.stuck_reported:
            state.stuck_reported = True
            log.warning(
                "cannot_restore_headroom",
                agent=state.agent,
                tokens=state.ctx.tokens,
                budget=state.marks.budget,
                reason=why,
            )
            self.headroom(state)

    def headroom(self, state: Session) -> None:
        """Alert once when headroom is below the reserve and nothing will fix it (over budget, auto
        compaction stuck, or a manual/off policy); say so again when it is back above the reserve."""
        tokens, marks = state.ctx.tokens, state.marks
        over_high = tokens >= marks.high
        alarming = tokens > marks.budget or (over_high and (state.policy != "auto" or state.stuck_reported))
        if alarming and not state.headroom_alert:
            state.headroom_alert = True
            fields = {"tokens": tokens, "budget": marks.budget, "reserve": marks.reserve}
            self.hub.emit("headroom_alert", state.agent, headroom=round(1 - state.usage, 4), **fields)
        elif state.headroom_alert and not over_high:
            state.headroom_alert = False
            self.hub.emit("headroom_ok", state.agent, headroom=round(1 - state.usage, 4), tokens=tokens)

    async def compact(self, state: Session, p: Planned) -> None:
        hub = self.hub
        t0 = time.monotonic()
        state.model_input = 0
        state.model_tokens = None
        summarizer, why = self.summarizer_for(state, p)  # model or not: chosen before the first await
        if why == "busy":  # unless the job has time to wait for the model lane
            summarizer, why = await self.wait_for_lane(state, p, summarizer)
        used_model = summarizer is hub.summarizer and hub.summarizer.engine is not None
        pending: Pending | None = None
        try:
            if used_model and isinstance(p, Plan) and self.budgets_model(state):
                pending, late = await digest_in_time(hub, self.cost, state, p, self.model_limit(state))
                used_model, why = not late, "late" if late else why
            else:
                pending = await build(state, p, summarizer)
        except Exception:
            log.exception("compaction_failed", agent=state.agent)
        finally:
            state.job_running = False
            fields: dict[str, Any] = {"seconds": time.monotonic() - t0}
            if pending is not None:
                # a digest that shows the model's lines is the model's, even when they were read
                # ahead and the job itself ran without it (watcher.serve.readahead)
                why = "" if pending.method == "model" else why or (pending.note if used_model else "")
                self.degrader.methods.count(pending.method, why)
                method = "model" if used_model else pending.method  # the time the model took
                self.degrader.times.record(method, time.monotonic() - state.job_started)
                fields |= {"method": pending.method, "model_skipped": why}
                hub.read_ahead.used(pending.ranked_ahead, pending.method == "model")
            log.info(  # one line per digest: the exact counts a replay's overlapping windows blur
                "digest_done",
                agent=state.agent,
                method=fields.get("method", ""),
                model_skipped=fields.get("model_skipped", ""),
                used_model=used_model,
                model_input=state.model_input,
                model_tokens=state.model_tokens,
                ranked_ahead=pending.ranked_ahead if pending is not None else 0,
                seconds=round(fields["seconds"], 3),
            )
            hub.emit("digest", state.agent, **fields)
            if isinstance(p, Plan):
                state.lookahead.job_done(time.monotonic() - state.job_submitted, p.tokens, used_model)
            hub.check_degraded()
        if hub.agents.get(state.agent) is not state:
            if pending is not None:
                records.abandon(state, pending)
            return
        if pending is None:
            self.stuck(state, "the digest would not be smaller than its region")
            return
        reason = state.ctx.stale_reason(pending.proposal)
        if reason:  # the mirror moved under the job: plan again on the next change
            records.abandon(state, pending)
            log.info("proposal_dropped", agent=state.agent, reason=reason)
            hub.emit("proposal_dropped", state.agent, reason=reason)
            self.maybe_compact(state)
            return
        if not records.record(hub, state, pending):
            return
        state.pending[pending.proposal.proposal] = pending  # (no second job starts meanwhile)
        await asyncio.to_thread(hub.store.sync_wal)  # durable before it leaves, off the loop
        crashpoint("before_send")
        if hub.agents.get(state.agent) is not state:
            return  # gone meanwhile: settled when it resumes (re-offered) or attaches afresh
        self._send(state, pending)

    def _send(self, state: Session, pending: Pending) -> None:
        pr = pending.proposal
        log.info(
            "proposal_sent",
            agent=state.agent,
            proposal=pr.proposal,
            sections=len(pr.replaces),
            tokens_before=pr.tokens_before,
            tokens_after=pr.tokens_after,
            method=pending.method,
        )
        self.hub.send(state.peer, pr.to_wire())
        self.hub.emit(
            "proposal_sent",
            state.agent,
            proposal=pr.proposal,
            sections=len(pr.replaces),
            tokens_before=pr.tokens_before,
            tokens_after=pr.tokens_after,
            invalidated_prefix_tokens=pr.invalidated_prefix_tokens,
            method=pending.method,
        )
