"""Turn a plan into a proposal: archive the originals first, then have the summarizer write the
digest of a region (watcher.planning.planner.Plan), or mask old tool outputs (a
watcher.planning.baselines.MaskPlan: the ``masking`` baseline)."""

from __future__ import annotations

import contextlib
from dataclasses import replace

from ipc.protocol import Proposal
from ipc.sections import Section
from summarizer.digest import Item, Summarizer
from watcher.planning.baselines import MaskPlan
from watcher.planning.planner import Plan
from watcher.planning.policies import Planned
from watcher.serve.degrade import model_note
from watcher.serve.session import Pending, Session, ranks_of
from watcher.store.crashpoints import crashpoint


async def build(
    state: Session, p: Planned, summarizer: Summarizer, model_tokens: int | None = None
) -> Pending | None:
    """The proposal for the plan ``p``; None if the region changed meanwhile or nothing was saved.
    ``model_tokens``: the most tokens the model may score for it (the job's time; None: no cap)."""
    if isinstance(p, MaskPlan):
        return await build_masking(state, p, summarizer)
    return await build_proposal(state, p, summarizer, model_tokens)


async def build_proposal(
    state: Session, plan: Plan, summarizer: Summarizer, model_tokens: int | None = None
) -> Pending | None:
    """Digest the plan's region; None if the region changed meanwhile or nothing was saved."""
    base = state.ctx.version
    originals = tuple(s for sid in plan.ids if (s := state.ctx.get(sid)) is not None)
    if len(originals) != len(plan.ids):
        return None
    ref, digest_id, pid = state.ids.take("a", "compactd-d", "p")  # the store's: never repeated
    await archive_first(state, ref, originals)
    items = [Item(s.id, s.kind, s.text, s.tokens, ranks_of(state, s)) for s in originals]
    try:
        digest = await summarizer.digest(items, ref, plan.target_tokens, model_tokens=model_tokens)
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
    return Pending(
        proposal, originals, digest.method, note=model_note(digest), ranked_ahead=digest.ranked_ahead
    )


async def archive_first(state: Session, ref: str, originals: tuple[Section, ...]) -> None:
    """Archive ``originals`` under ``ref``, committed to the store before the proposal exists (a
    store view encodes the rows in a thread: the loop only inserts and commits)."""
    put = getattr(state.archive, "put", None)
    if put is not None:
        await put(ref, originals)
    else:
        state.archive[ref] = originals
    crashpoint("archived")


def forget(state: Session, ref: str) -> None:
    """Drop the archive entry of a job that produced no proposal (nothing can refer to it)."""
    with contextlib.suppress(KeyError):
        del state.archive[ref]


def placeholder(sec: Section, ref: str) -> str:
    lines = sec.text.count("\n") + 1
    return f"[Old tool output omitted: {lines} lines, {sec.tokens} tokens; recall {ref} for it]"


async def build_masking(state: Session, p: MaskPlan, summarizer: Summarizer) -> Pending | None:
    """Archive the masked outputs, then propose the range with placeholders in their place.

    Sections of the range that are not masked are passed through unchanged (same id, same text),
    so the agent's context changes only where an output was masked.
    """
    base = state.ctx.version
    originals = tuple(s for sid in p.ids if (s := state.ctx.get(sid)) is not None)
    if len(originals) != len(p.ids):
        return None
    masked = set(p.masked)
    archived = tuple(s for s in originals if s.id in masked)
    ref, pid = state.ids.take("a", "p")  # the store's: never repeated
    await archive_first(state, ref, archived)
    out: list[Section] = []
    for s in originals:
        if s.id not in masked:
            out.append(s)
            continue
        text = placeholder(s, ref)
        meta = {**s.meta, "masked": "1", "archive": ref, "method": "masking"}
        out.append(replace(s, text=text, tokens=summarizer.count(text), meta=meta))
    before = sum(s.tokens for s in originals)
    after = sum(s.tokens for s in out)
    if after >= before:
        forget(state, ref)
        return None
    proposal = Proposal(
        proposal=pid,
        base=base,
        replaces=p.ids,
        digest=tuple(out),
        tokens_before=before,
        tokens_after=after,
        invalidated_prefix_tokens=p.invalidated_prefix_tokens,
        archive=(ref,),
    )
    return Pending(proposal, archived, "masking")
