"""The baselines compactd is measured against: which sections `reactive` and `masking` fold.

They run inside the real daemon, through the same mirror, archive and proposal path as the
product's planner (watcher.planning.policies), so a replay compares policies and nothing else.

* ``reactive`` -- how Claude Code and Codex compact: nothing happens until the agent's next LLM
  call would not fit (usage above the budget); then the agent waits while the oldest non-anchor
  history is summarized by the same summarizer (one job, down to the low watermark).
* ``masking`` -- observation masking, the "Complexity Trap" baseline (Lindenbauer et al. 2025,
  arXiv 2508.21433): tool outputs older than the freshest ``MASK_KEEP_TURNS`` turns are replaced
  by a one-line placeholder; everything else stays verbatim. Deterministic, no model. As in
  compactd it is triggered at the high watermark (the paper masks on every turn, which would bust
  the agent's prompt cache on every turn); the originals are archived and recallable.

Only the pure choice lives here; the proposals are built in watcher.serve.compactor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ipc.sections import Section
from watcher.planning.planner import (
    MIN_REGION_TOKENS,
    Plan,
    Watermarks,
    anchor_mask,
    digest_target,
    fresh_start,
    oversize_limit,
)

MASK_KEEP_TURNS: Final = 10  # the paper's window: the last 10 turns keep their observations
MASKABLE_KINDS: Final = frozenset({"tool_result"})
MASK_MIN_TOKENS: Final = 24  # a placeholder is ~20 tokens: masking a smaller output saves nothing


@dataclass(frozen=True)
class MaskPlan:
    """A contiguous range whose tool outputs in ``masked`` become placeholders; the rest stays."""

    ids: tuple[str, ...]  # the contiguous range the proposal replaces
    masked: tuple[str, ...]  # the tool outputs inside it that are masked
    tokens: int  # tokens of the masked outputs
    invalidated_prefix_tokens: int


# --- reactive -------------------------------------------------------------------------------------


def plan_reactive(sections: Sequence[Section], marks: Watermarks, fresh: int) -> Plan | None:
    """Over the budget: the oldest run of non-anchor sections, long enough to reach the low mark.

    No scoring: the oldest history goes first, as in an agent's own ``/compact``. The anchors are
    the planner's (system, user instructions, critical, pinned, digests, the freshest ``fresh``
    turns); a group (a tool call and its output) is never split. None when the context fits or
    nothing is foldable.
    """
    if sum(s.tokens for s in sections) <= marks.budget:
        return None
    return oldest_region(sections, marks, fresh, "reactive")


def oldest_region(sections: Sequence[Section], marks: Watermarks, fresh: int, strategy: str) -> Plan | None:
    """The oldest run of non-anchor sections whose digest brings the context down to the low
    mark (or the longest there is), whatever the usage; None if nothing is foldable. Also the
    region of a degraded job's head/tail digest (watcher.serve.degrade): no scoring, O(n)."""
    total = sum(s.tokens for s in sections)
    need = total - marks.low
    anchors = anchor_mask(sections, fresh, oversize_limit(marks))
    n = len(sections)
    start = 0
    while start < n:
        while start < n and anchors[start]:
            start += 1
        stop = start
        tokens = 0
        while stop < n and not anchors[stop]:
            tokens += sections[stop].tokens
            stop += 1
            in_group = (
                stop < n and bool(sections[stop].group) and sections[stop].group == sections[stop - 1].group
            )
            if tokens - digest_target(tokens, marks.budget) >= need and not in_group:
                break
        if stop > start and tokens >= MIN_REGION_TOKENS:
            prefix = sum(s.tokens for s in sections[:start])
            ids = tuple(s.id for s in sections[start:stop])
            target = digest_target(tokens, marks.budget)
            return Plan(ids, tokens, target, total - prefix, need=need, strategy=strategy)
        start = max(stop, start + 1)
    return None


# --- masking --------------------------------------------------------------------------------------


def is_masked(sec: Section) -> bool:
    return sec.meta.get("masked") == "1"


def plan_masking(
    sections: Sequence[Section],
    marks: Watermarks,
    fresh: int,
    keep_turns: int = MASK_KEEP_TURNS,
    over: int | None = None,
) -> MaskPlan | None:
    """At the high watermark: mask every tool output older than the freshest ``keep_turns`` turns.

    The daemon's own fresh-turn anchor (``fresh``) is honoured too if it is longer. A turn is a run
    of sections sharing a ``group`` (watcher.planning.planner.fresh_start). Pinned and critical sections are
    never masked. None under the high watermark (or ``over``, when given) or when nothing is left to
    mask.
    """
    total = sum(s.tokens for s in sections)
    if total < (marks.high if over is None else over):
        return None
    stop = fresh_start(sections, max(keep_turns, fresh))
    masked = [
        i
        for i in range(stop)
        if sections[i].kind in MASKABLE_KINDS
        and not sections[i].pinned
        and sections[i].priority != "critical"
        and not is_masked(sections[i])
        and sections[i].tokens >= MASK_MIN_TOKENS
    ]
    if not masked:
        return None
    first, last = masked[0], masked[-1]
    prefix = sum(s.tokens for s in sections[:first])
    return MaskPlan(
        ids=tuple(s.id for s in sections[first : last + 1]),
        masked=tuple(sections[i].id for i in masked),
        tokens=sum(sections[i].tokens for i in masked),
        invalidated_prefix_tokens=total - prefix,
    )
