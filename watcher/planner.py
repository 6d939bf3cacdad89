"""Choose what to compact: one contiguous region per proposal, by value lost plus cache cost.

A plan is made only when (projected) usage reaches the high watermark, and it aims at the low
watermark: it removes ``need = tokens - low`` (the digest counted) and not much more. Among the
regions that achieve that, it takes the one that loses the least value (the sum of the sections'
scores, watcher.scoring) plus the prompt-cache cost of cutting there (``cache_weight`` ×
invalidated prefix tokens / budget: a cut invalidates the agent's cache from its first replaced
section onward, so later cuts are cheaper). Each region is minimal for where it starts, so a plan
never removes far more than needed: dropping its last group would leave ``need`` unmet. When no
region can meet ``need`` (what is left is mostly anchors), the plan folds the region that saves the
most; when nothing at all is foldable it returns None and the server says so once.

Anchors are never in a region: the system prompt, user instructions (user sections of priority
critical or high), critical and pinned sections (the current goal, decisions), prior digests
(kept verbatim: a digest is never summarized again) and the freshest N turns. A turn is a run of
sections sharing a ``group`` (an LLM step and the tool outputs answering it); an ungrouped
section is a turn of its own. A fresh section bigger than half the gap between the watermarks is
not protected: it cannot stay whole anyway. Groups are never split.

Strategies: ``optimistic`` scores by priority × relevance × recency × density; ``recency`` is the
same machinery with score = recency only (the regret baseline). Other strategies (the replay
baselines) live in watcher.strategies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ipc.sections import Section
from watcher.scoring import Scorer, Valuation

MIN_REGION_TOKENS = 200  # below this a digest (header + facts) saves too little to be worth a cache miss
STRATEGIES: Final = ("optimistic", "recency")
DEFAULT_CACHE_WEIGHT: Final = 1.0


@dataclass(frozen=True)
class Watermarks:
    budget: int
    reserve: float
    low_ratio: float

    @property
    def high(self) -> int:
        return int(self.budget * (1.0 - self.reserve))

    @property
    def low(self) -> int:
        return int(self.budget * min(self.low_ratio, 1.0 - self.reserve))


@dataclass(frozen=True)
class Plan:
    ids: tuple[str, ...]
    tokens: int  # tokens in the region
    target_tokens: int  # the digest should be at most this big
    invalidated_prefix_tokens: int  # tokens from the first replaced section on (the agent's cache miss)
    need: int = 0  # tokens to remove to reach the low watermark
    value: float = 0.0  # summed score of the region: what folding it loses
    strategy: str = "optimistic"

    @property
    def saved(self) -> int:
        return self.tokens - self.target_tokens


def digest_target(region_tokens: int, budget: int) -> int:
    return max(48, min(region_tokens // 6, budget // 12))


# --- anchors --------------------------------------------------------------------------------------


def is_fixed_anchor(sec: Section) -> bool:
    """Anchored whatever its position: system, user instructions, critical, pinned, digests."""
    if sec.kind in ("system", "digest") or sec.pinned or sec.priority == "critical":
        return True
    return sec.kind == "user" and sec.priority == "high"


def is_anchor(sec: Section, position: int, count: int, fresh: int, oversize: int) -> bool:
    """Never summarized: :func:`is_fixed_anchor`, or among the freshest ``fresh`` *sections*.

    (The planner protects the freshest turns with :func:`anchor_mask`; this per-section form is
    kept for callers that count sections.) A fresh section bigger than ``oversize`` is not
    protected: it cannot stay whole anyway.
    """
    if is_fixed_anchor(sec):
        return True
    return position >= count - fresh and sec.tokens <= oversize


def fresh_start(sections: Sequence[Section], turns: int) -> int:
    """Index of the first section of the freshest ``turns`` turns (a turn: a run of one group)."""
    if turns <= 0:
        return len(sections)
    seen = 0
    last: str | None = None
    for i in range(len(sections) - 1, -1, -1):
        g = sections[i].group
        if not g or g != last:
            seen += 1
            if seen > turns:
                return i + 1
        last = g or None
    return 0


def anchor_mask(sections: Sequence[Section], fresh_turns: int, oversize: int) -> list[bool]:
    start = fresh_start(sections, fresh_turns)
    return [
        is_fixed_anchor(s) or (i >= start and s.tokens <= oversize) for i, s in enumerate(sections)
    ]


def oversize_limit(marks: Watermarks) -> int:
    return max(1, (marks.high - marks.low) // 2)


# --- planning -------------------------------------------------------------------------------------


def should_plan(tokens: int, marks: Watermarks, growth: int = 0) -> bool:
    """O(1): is (projected) usage at the high watermark? ``growth`` is capped at half the gap
    between the watermarks, so an early plan still has at least that much to remove."""
    return tokens + min(max(growth, 0), (marks.high - marks.low) // 2) >= marks.high


def plan(
    sections: Sequence[Section],
    marks: Watermarks,
    fresh: int,
    *,
    strategy: str = "optimistic",
    scorer: Scorer | None = None,
    growth: int = 0,
    cache_weight: float = DEFAULT_CACHE_WEIGHT,
) -> Plan | None:
    """The region to fold now, or None (under the high watermark, or nothing foldable).

    ``fresh`` is the number of fresh turns kept; ``growth`` the tokens expected to arrive before a
    digest started now would be ready (look-ahead; 0 = plan at the high watermark only).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"planner strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    total = sum(s.tokens for s in sections)
    if not should_plan(total, marks, growth):
        return None
    need = total - marks.low
    if need <= 0:
        return None
    anchors = anchor_mask(sections, fresh, oversize_limit(marks))
    if all(anchors):
        return None
    valuation = (scorer or Scorer()).valuation(sections, strategy)
    return _choose(sections, anchors, valuation, marks, total, need, cache_weight, strategy)


def _choose(
    sections: Sequence[Section],
    anchors: Sequence[bool],
    valuation: Valuation,
    marks: Watermarks,
    total: int,
    need: int,
    cache_weight: float,
    strategy: str,
) -> Plan | None:
    n = len(sections)
    tok = [0] * (n + 1)
    for i, s in enumerate(sections):
        tok[i + 1] = tok[i] + s.tokens

    def saved(i: int, j: int) -> int:
        t = tok[j] - tok[i]
        return t - digest_target(t, marks.budget)

    def cost(i: int, j: int) -> float:
        return valuation.region(i, j) + cache_weight * (total - tok[i]) / marks.budget

    best: tuple[float, int, int] | None = None  # (cost, -start, end) of a region meeting need
    fallback: tuple[int, float, int, int] | None = None  # (-saved, cost, start, end)
    for a, b in _runs(anchors):
        cuts = [k for k in range(a, b + 1) if k in (a, b) or not _same_group(sections, k - 1, k)]
        j_idx = 1
        for i_idx, i in enumerate(cuts[:-1]):
            j_idx = max(j_idx, i_idx + 1)
            while j_idx < len(cuts) - 1 and saved(i, cuts[j_idx]) < need:
                j_idx += 1
            j = cuts[j_idx]
            if tok[j] - tok[i] < MIN_REGION_TOKENS:
                continue
            if saved(i, j) >= need:
                key = (cost(i, j), -i, j)
                if best is None or key < best:
                    best = key
            else:
                fb = (-saved(i, j), cost(i, j), i, j)
                if fallback is None or fb < fallback:
                    fallback = fb
    if best is not None:
        i, j = -best[1], best[2]
    elif fallback is not None:
        i, j = fallback[2], fallback[3]
    else:
        return None
    tokens = tok[j] - tok[i]
    return Plan(
        ids=tuple(s.id for s in sections[i:j]),
        tokens=tokens,
        target_tokens=digest_target(tokens, marks.budget),
        invalidated_prefix_tokens=total - tok[i],
        need=need,
        value=round(valuation.region(i, j), 6),
        strategy=strategy,
    )


def _same_group(sections: Sequence[Section], i: int, j: int) -> bool:
    g = sections[j].group
    return bool(g) and sections[i].group == g


def _runs(anchors: Sequence[bool]) -> list[tuple[int, int]]:
    """Maximal runs [start, stop) of consecutive non-anchor sections, oldest first."""
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for i, anchored in enumerate(anchors):
        if anchored:
            if start is not None:
                runs.append((start, i))
            start = None
        elif start is None:
            start = i
    if start is not None:
        runs.append((start, len(anchors)))
    return runs
