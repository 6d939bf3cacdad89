"""Choose what to compact. (Vertical slice: the oldest non-anchor sections; see issue 4.)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ipc.sections import Section

MIN_REGION_TOKENS = 200  # below this a digest (header + facts) saves too little to be worth a cache miss


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
    invalidated_prefix_tokens: int  # tokens after the first replaced section (the agent's cache miss)


def is_anchor(sec: Section, position: int, count: int, fresh: int, oversize: int) -> bool:
    """Never summarized: system prompt, critical or pinned sections, digests, the freshest N.

    A fresh section bigger than ``oversize`` is not protected: it cannot stay whole anyway.
    """
    if sec.kind in ("system", "digest") or sec.pinned or sec.priority == "critical":
        return True
    return position >= count - fresh and sec.tokens <= oversize


def plan(sections: Sequence[Section], marks: Watermarks, fresh: int) -> Plan | None:
    """A contiguous region that brings usage down to the low watermark, or None under the high one."""
    total = sum(s.tokens for s in sections)
    if total < marks.high:
        return None
    need = total - marks.low
    oversize = max(1, (marks.high - marks.low) // 2)
    big = _oversized(sections, fresh, oversize)
    if big is not None:
        prefix = sum(s.tokens for s in sections[:big])
        sec = sections[big]
        return Plan((sec.id,), sec.tokens, digest_target(sec.tokens, marks.budget), total - prefix)
    for start, stop in _runs(sections, fresh, oversize):
        region: list[Section] = []
        tokens = 0
        for i in range(start, stop):
            region.append(sections[i])
            tokens += sections[i].tokens
            saved = tokens - digest_target(tokens, marks.budget)
            splits_group = (
                i + 1 < stop and sections[i + 1].group and sections[i + 1].group == sections[i].group
            )
            if saved >= need and not splits_group:
                break
        if tokens >= MIN_REGION_TOKENS:
            prefix = sum(s.tokens for s in sections[:start])
            return Plan(
                tuple(s.id for s in region), tokens, digest_target(tokens, marks.budget), total - prefix
            )
    return None


def _runs(sections: Sequence[Section], fresh: int, oversize: int) -> list[tuple[int, int]]:
    """Maximal runs [start, stop) of consecutive non-anchor sections, oldest first."""
    n = len(sections)
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for i, s in enumerate(sections):
        if is_anchor(s, i, n, fresh, oversize):
            if start is not None:
                runs.append((start, i))
            start = None
        elif start is None:
            start = i
    if start is not None:
        runs.append((start, n))
    return runs


def _oversized(sections: Sequence[Section], fresh: int, oversize: int) -> int | None:
    """The index of the largest non-anchor section bigger than ``oversize`` (one huge tool output)."""
    n = len(sections)
    best: int | None = None
    for i, s in enumerate(sections):
        bigger = best is None or s.tokens > sections[best].tokens
        if s.tokens > oversize and bigger and not is_anchor(s, i, n, fresh, oversize):
            best = i
    return best


def digest_target(region_tokens: int, budget: int) -> int:
    return max(48, min(region_tokens // 6, budget // 12))
