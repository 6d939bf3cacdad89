"""Choose what to compact: one contiguous region per proposal, by value lost plus cache cost.

A plan is made only when (projected) usage reaches the high watermark, and it aims at the low
watermark: it removes ``need = tokens + growth - low`` (the digest counted; ``growth`` is what the
context is expected to gain before the digest is ready, 0 without look-ahead) and not much more.
Among the regions that achieve that, ``optimistic`` weighs what folding each would lose (its value,
valued as a whole: watcher.planning.scoring) plus the prompt-cache cost of cutting there
(``cache_weight`` × invalidated prefix tokens / budget: a cut invalidates the agent's cache from its
first replaced section onward, so later cuts are cheaper), and takes the *oldest* region whose cost
is within ``evidence_sigmas`` (ScoreParams, 1 by default) standard deviations of the cheapest's:
the value is an expected count of regretted sections, each section a guess with its own variance
(:meth:`Valuation.spread`), and the age order (older output is more often superseded) decides
unless the value tells two regions apart by more than that. Measured over 12 budgets and look-ahead
settings at the default watermarks, this halves how much optimistic loses to recency on the
trajectories where it loses (docs/BENCHMARKS.md, "Planner and regret"). Each region is minimal for
where it starts, so a plan never removes far more than needed: dropping its last group would leave
``need`` unmet. When no region can meet ``need`` (what is left is mostly anchors and digests), the
plan folds the region that saves the most. Below the high mark (a look-ahead plan) that region
must save at least a quarter of the gap between the watermarks, else the plan waits (None) until
more is foldable: folding a sliver every turn would bust the agent's cache every turn for little
room. When nothing at all is foldable it returns None and the server says so once. One region per
plan keeps cuts few and contiguous: one cache miss per compaction.

Anchors are never in a region: the system prompt, user instructions (user sections of priority
critical or high), critical and pinned sections (the current goal, decisions), prior digests and
outputs folded in place before (kept verbatim: a digest is never summarized again) and the
freshest N turns. A turn is a run of sections sharing a ``group`` (an LLM step and the tool
outputs answering it); an ungrouped section is a turn of its own. A fresh section bigger than
half the gap between the watermarks is not protected: it cannot stay whole anyway. Groups are
never split.

``recency``, the baseline regret is measured against, is the same machinery (anchors, watermarks,
look-ahead, minimal regions, groups, digests) with the score = recency only: the age order decides,
so it folds the oldest region that meets the need, as the vertical slice and agents' own
``/compact`` do. (Summing a recency score with the cache term instead would let the half-life, an
arbitrary constant, decide between early and late cuts.) Other strategies (the replay baselines
``reactive`` and ``masking``) live in watcher.planning.baselines; watcher.planning.policies puts
all four behind one protocol.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from ipc.sections import Section
from watcher.planning.scoring import Scorer, Valuation

MIN_REGION_TOKENS = 200  # below this a digest (header + facts) saves too little to be worth a cache miss
STRATEGIES: Final = ("optimistic", "recency")
DEFAULT_CACHE_WEIGHT: Final = 1.0
SLIVER_SHARE: Final = 0.25  # an early region that cannot meet the need saves this share of the gap


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

    @property
    def reserve_tokens(self) -> int:
        """The tokens above the high watermark: the agent's, for its next turn."""
        return self.budget - self.high

    @property
    def fit_tokens(self) -> int:
        """The largest turn a plan can make room for: the tokens above the low watermark."""
        return self.budget - self.low


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
    if "archive" in sec.meta:  # folded in place before (a masked or digested output): keep verbatim
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
    """Per section: never summarized? Whole groups: a group (an LLM step and the tool outputs
    answering it) is never split, since providers reject a tool call without its result and the
    reverse. A group with a fixed anchor is anchored whole; a fresh group holding an oversized
    section is foldable whole (it cannot stay); any other mixed group is anchored whole."""
    start = fresh_start(sections, fresh_turns)
    mask = [is_fixed_anchor(s) or (i >= start and s.tokens <= oversize) for i, s in enumerate(sections)]
    i = 0
    while i < len(sections):
        j = i + 1
        while j < len(sections) and _same_group(sections, i, j):
            j += 1
        if j - i > 1 and any(mask[i:j]) and not all(mask[i:j]):
            fixed = any(is_fixed_anchor(s) for s in sections[i:j])
            mask[i:j] = [fixed or not any(s.tokens > oversize for s in sections[i:j])] * (j - i)
        i = j
    return mask


def oversize_limit(marks: Watermarks) -> int:
    return max(1, (marks.high - marks.low) // 2)


# --- planning -------------------------------------------------------------------------------------


EARLY_SHARE: Final = 0.75  # a plan may come this share of the watermark gap before the high mark


def early_cap(marks: Watermarks) -> int:
    """How early a plan may come at most: EARLY_SHARE of the gap between the watermarks. The rest
    of the gap is what keeps a compaction from starting again right after one."""
    return int((marks.high - marks.low) * EARLY_SHARE)


def early_by(marks: Watermarks, growth: int) -> int:
    """``growth`` capped at :func:`early_cap`: how early a plan comes."""
    return min(max(growth, 0), early_cap(marks))


def min_early_saving(marks: Watermarks) -> int:
    """Below the high mark, a region that cannot meet the need is folded only if it saves this
    much (SLIVER_SHARE of the watermark gap); else the plan waits for more to become foldable."""
    return int((marks.high - marks.low) * SLIVER_SHARE)


def trigger_tokens(marks: Watermarks, growth: int = 0) -> int:
    """Plan once the context holds more than this many tokens: the high watermark, less the
    growth expected before a digest started now is ready (look-ahead), capped (:func:`early_by`)."""
    return marks.high - 1 - early_by(marks, growth)


def should_plan(tokens: int, marks: Watermarks, growth: int = 0) -> bool:
    """O(1): is (projected) usage at the high watermark?"""
    return tokens > trigger_tokens(marks, growth)


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
    ``optimistic`` takes the oldest region whose value plus cache cost is within the evidence
    margin of the cheapest (:func:`_choose`); ``recency`` the oldest region (the age order only).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"planner strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    total = sum(s.tokens for s in sections)
    if not should_plan(total, marks, growth):
        return None
    need = total + early_by(marks, growth) - marks.low  # at the low watermark when it is applied
    if need <= 0:
        return None
    anchors = anchor_mask(sections, fresh, oversize_limit(marks))
    if all(anchors):
        return None
    windows = _windows(sections, anchors, marks, need)
    if not windows:
        return None
    tok = windows.prefix
    sc = scorer or Scorer()
    v = None if strategy == "recency" else sc.valuation(sections)
    if not windows.meeting:
        i, j = max(windows.short, key=lambda w: (tok[w[1]] - tok[w[0]], -w[0]))
        if _saved(tok[j] - tok[i], marks.budget) < min_early_saving(marks) and total < marks.high:
            return None  # early (look-ahead): a sliver now would be a cache miss for little room
    elif v is None:
        i, j = min(windows.meeting)
    else:
        val = v
        val.regions(windows.meeting)  # every candidate's value in one sliding pass (memoized)

        def cost(w: tuple[int, int]) -> float:
            return val.region(*w) + cache_weight * (total - tok[w[0]]) / marks.budget

        i, j = _choose(windows.meeting, val, cost, sc.params.evidence_sigmas)
    tokens = tok[j] - tok[i]
    return Plan(
        ids=tuple(s.id for s in sections[i:j]),
        tokens=tokens,
        target_tokens=digest_target(tokens, marks.budget),
        invalidated_prefix_tokens=total - tok[i],
        need=need,
        value=round(v.region(i, j), 6) if v is not None else 0.0,
        strategy=strategy,
    )


def _choose(
    meeting: Sequence[tuple[int, int]],
    val: Valuation,
    cost: Callable[[tuple[int, int]], float],
    sigmas: float,
) -> tuple[int, int]:
    """The oldest region whose cost is within ``sigmas`` standard deviations of the cheapest's:
    the value (expected regretted sections) overrides the age order only where it tells the
    regions apart by more than its own spread (:meth:`Valuation.spread` of both)."""
    best = min(meeting, key=lambda w: (cost(w), -w[0]))
    if sigmas <= 0:
        return best
    low = cost(best)
    spread = val.spread(*best)
    for w in sorted(meeting):
        if cost(w) <= low + sigmas * math.sqrt(spread + val.spread(*w)):
            return w
    return best  # (not reached: best itself qualifies)


@dataclass
class _Windows:
    prefix: list[int]  # prefix[i] = tokens of sections[:i]
    meeting: list[tuple[int, int]]  # for each start, the shortest [i, j) that meets the need
    short: list[tuple[int, int]]  # starts where even the rest of the run falls short: [i, run end)

    def __bool__(self) -> bool:
        return bool(self.meeting or self.short)


def _saved(tokens: int, budget: int) -> int:
    return tokens - digest_target(tokens, budget)


def _windows(sections: Sequence[Section], anchors: Sequence[bool], marks: Watermarks, need: int) -> _Windows:
    """Candidate regions: per possible start (a group boundary inside a run of non-anchors), the
    shortest region that saves ``need``, or the whole rest of the run if none does. Regions under
    MIN_REGION_TOKENS are left out. Two pointers: O(sections)."""
    tok = [0] * (len(sections) + 1)
    for i, s in enumerate(sections):
        tok[i + 1] = tok[i] + s.tokens

    def saved(i: int, j: int) -> int:
        return _saved(tok[j] - tok[i], marks.budget)

    out = _Windows(tok, [], [])
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
            (out.meeting if saved(i, j) >= need else out.short).append((i, j))
    return out


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
