"""Turn a plan into a proposal: archive the originals, have the summarizer write the digest."""

from __future__ import annotations

import itertools

from ipc.protocol import Proposal
from ipc.sections import Section
from summarizer.digest import Item, Summarizer
from watcher.agents import AgentState, Pending
from watcher.planner import Plan

_ids = itertools.count(1)


def next_id(prefix: str) -> str:
    return f"{prefix}{next(_ids)}"


async def build_proposal(state: AgentState, plan: Plan, summarizer: Summarizer) -> Pending | None:
    """Digest the plan's region; None if the region changed meanwhile or nothing was saved."""
    base = state.ctx.version
    originals = tuple(s for sid in plan.ids if (s := state.ctx.get(sid)) is not None)
    if len(originals) != len(plan.ids):
        return None
    ref = next_id("a")
    state.archive[ref] = originals  # archive first: the originals exist before the proposal leaves
    items = [Item(s.id, s.kind, s.text, s.tokens) for s in originals]
    digest = await summarizer.digest(items, ref, plan.target_tokens)
    if digest.tokens >= plan.tokens:
        return None
    section = Section(
        id=next_id("compactd-d"),
        kind="digest",
        role="user",
        text=digest.text,
        tokens=digest.tokens,
        priority="high",
        meta={"archive": ref, "method": digest.method, "sections": str(len(originals))},
    )
    proposal = Proposal(
        proposal=next_id("p"),
        base=base,
        replaces=plan.ids,
        digest=(section,),
        tokens_before=plan.tokens,
        tokens_after=digest.tokens,
        invalidated_prefix_tokens=plan.invalidated_prefix_tokens,
        archive=(ref,),
    )
    return Pending(proposal, originals, digest.method)
