"""Turn a plan into a proposal: archive the originals, have the summarizer write the digest."""

from __future__ import annotations

import contextlib

from ipc.protocol import Proposal
from ipc.sections import Section
from summarizer.digest import Item, Summarizer
from watcher.planning.planner import Plan
from watcher.serve.agents import AgentState, Pending
from watcher.store.crashpoints import crashpoint


async def build_proposal(state: AgentState, plan: Plan, summarizer: Summarizer) -> Pending | None:
    """Digest the plan's region; None if the region changed meanwhile or nothing was saved."""
    base = state.ctx.version
    originals = tuple(s for sid in plan.ids if (s := state.ctx.get(sid)) is not None)
    if len(originals) != len(plan.ids):
        return None
    ref, digest_id, pid = state.ids.take("a", "compactd-d", "p")  # the store's: never repeated
    await archive_first(state, ref, originals)
    items = [Item(s.id, s.kind, s.text, s.tokens) for s in originals]
    try:
        digest = await summarizer.digest(items, ref, plan.target_tokens)
    except BaseException:
        forget(state, ref)
        raise
    if digest.tokens >= plan.tokens:
        forget(state, ref)
        return None
    section = Section(
        id=digest_id,
        kind="digest",
        role="user",
        text=digest.text,
        tokens=digest.tokens,
        priority="high",
        meta={"archive": ref, "method": digest.method, "sections": str(len(originals))},
    )
    proposal = Proposal(
        proposal=pid,
        base=base,
        replaces=plan.ids,
        digest=(section,),
        tokens_before=plan.tokens,
        tokens_after=digest.tokens,
        invalidated_prefix_tokens=plan.invalidated_prefix_tokens,
        archive=(ref,),
    )
    return Pending(proposal, originals, digest.method)


async def archive_first(state: AgentState, ref: str, originals: tuple[Section, ...]) -> None:
    """Archive ``originals`` under ``ref``, committed to the store before the proposal exists (a
    store view encodes the rows in a thread: the loop only inserts and commits)."""
    put = getattr(state.archive, "put", None)
    if put is not None:
        await put(ref, originals)
    else:
        state.archive[ref] = originals
    crashpoint("archived")


def forget(state: AgentState, ref: str) -> None:
    """Drop the archive entry of a job that produced no proposal (nothing can refer to it)."""
    with contextlib.suppress(KeyError):
        del state.archive[ref]
