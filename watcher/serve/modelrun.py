"""A model job that cannot make its agent wait: the model's digest, unless the context reaches the
model's limit first, in which case the job digests the same region deterministically.

The look-ahead starts a model job only when its measured cost says the digest will be ready before
the context reaches the model's limit at the agent's average pace
(watcher.serve.jobs.Jobs.model_limit: the high watermark). A large turn can still come while the model works;
then (``Session.hurry``, set by watcher.serve.jobs.Jobs.maybe_compact on the delta that reaches
the limit) the model's work is cancelled (the engine stops at its next token or batch), the lane
goes back, and the deterministic digest (milliseconds, in the digest worker) is sent instead, before
the agent's next call. The job's measured time goes to the model's cost either way (a cut-off
job's time is a lower bound of what it would have taken)."""

from __future__ import annotations

import asyncio
import contextlib
import time

from watcher.observe import logs
from watcher.planning.planner import Plan
from watcher.serve.compactor import build
from watcher.serve.hub import Hub
from watcher.serve.modelcost import ModelCost, engine_totals
from watcher.serve.session import Pending, Session, hurry_at

log = logs.get("compactd.server")


async def digest_in_time(
    hub: Hub, cost: ModelCost, state: Session, p: Plan, limit: int
) -> tuple[Pending | None, bool]:
    """(the proposal, late): the model's, or if the context reached ``limit`` tokens before it was
    ready (``late``), the deterministic one of the same region. ``cost`` learns the job's time."""
    t0 = time.monotonic()
    with hurry_at(state, limit) as hurry:
        model = asyncio.create_task(
            build(state, p, hub.summarizer, state.model_tokens), name=f"model-{state.agent}"
        )
        waiter = asyncio.create_task(hurry.wait())
        try:
            await asyncio.wait((model, waiter), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not model.done():
                model.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await model
    seconds = time.monotonic() - t0
    engine = hub.summarizer.engine
    totals = engine_totals(engine.stats()) if engine is not None else (0.0, 0.0)
    if not model.cancelled():
        cost.record(state.model_input, seconds, totals)
        return model.result(), False
    if seconds > (cost.expect(state.model_input) or 0.0):
        cost.record(state.model_input, seconds, totals)  # at least this long: the estimate learns
    log.info(
        "model_late",
        agent=state.agent,
        tokens=state.ctx.tokens,
        limit=limit,
        seconds=round(seconds, 3),
    )
    return await build(state, p, hub.scheduler.deterministic(hub.summarizer)), True
