"""Value of sections: priority weight × relevance × recency × information density.

The value of folding a section away is the chance that the agent will need what it would lose
(regret, watcher.regret), times a weight:

    score(s) = weight[priority] × recency × density × risk
    recency  = 2 ** (-age / half_life)          age in turns (LLM steps) since the section arrived
    density  = max(density_floor, noise)
    risk     = 1 - Π (1 - p(x)) over the identifiers x that would be lost

* **relevance** is ``p(x)`` (watcher.relevance): the chance that the agent refers to identifier
  ``x`` (a file, function, class or error name) again: high for what it wrote about lately, lower
  for the goal, lowest for what only tool output mentioned.
* **lost** identifiers are those no other section in the context holds: the first of two reads of
  a file, a test run that was re-run, near-duplicate output lose nothing the context does not
  still say, so they score low.
* **density** is the rest of information density: noise, few distinct lines repeated many times
  (progress bars, repeated log lines; ``noise = sqrt(distinct lines / lines)``). Text with few
  identifiers is low-risk anyway.

Regions are valued as a whole (:meth:`Valuation.region`): an identifier is lost only when every
section holding it is in the region, and losing it also exposes the sections holding it that were
folded before (``exposure`` × p(x) × their number: they could be done without only while it was
still there). So the planner keeps at least one holder of what the agent is likely to need. The
value of a region never decreases when it grows.

Per-section features are computed once and cached by section id and text: a plan costs
O(sections + identifiers), and ingesting a delta costs nothing here.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ipc.sections import Section
from watcher.identifiers import identifiers, terms, window
from watcher.relevance import (
    RELEVANCE_METHODS,
    STEP_KINDS,
    Focus,
    MentionModel,
    Mentions,
    bm25_scores,
    mentions,
    overlap_scores,
)

if TYPE_CHECKING:
    from watcher.config import CompactionConfig

DEFAULT_WEIGHTS: Mapping[str, float] = {"critical": 2.0, "high": 1.5, "medium": 1.0, "low": 0.5}
_DIGITS = re.compile(r"\d+")
_MIN_LINE = 8  # shorter lines (braces, blank-ish) say nothing about redundancy


@dataclass(frozen=True)
class ScoreParams:
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    half_life_turns: float = 64.0
    relevance: str = "mentions"  # mentions | bm25 | overlap | none
    mentions: MentionModel = field(default_factory=MentionModel)
    density_floor: float = 0.3
    exposure: float = 1.0
    relevance_floor: float = 0.2  # per-section methods only
    focus_turns: int = 3  # per-section methods: the agent's last N turns are part of the focus

    def __post_init__(self) -> None:
        if self.relevance not in RELEVANCE_METHODS:
            known = ", ".join(RELEVANCE_METHODS)
            raise ValueError(f"relevance must be one of {known}, got {self.relevance!r}")
        if not self.half_life_turns > 0:
            raise ValueError(f"half_life_turns must be > 0, got {self.half_life_turns}")
        if any(w < 0 for w in self.weights.values()):
            raise ValueError("priority weights must be >= 0")


@dataclass(frozen=True, slots=True)
class Features:
    idents: frozenset[str]
    lines: frozenset[int]  # hashes of distinct normalized lines (digits folded)
    line_count: int  # lines of at least _MIN_LINE characters
    terms: tuple[str, ...] = ()  # only computed for the bm25 method

    @property
    def noise(self) -> float:
        """1.0 for text whose lines are all distinct, towards 0 for a few lines repeated."""
        if self.line_count < 4:
            return 1.0
        return math.sqrt(len(self.lines) / self.line_count)


def features(text: str, with_terms: bool = False) -> Features:
    hashes: set[int] = set()
    count = 0
    for raw in re.split(r"[\r\n]+", window(text)):
        line = raw.strip()
        if len(line) < _MIN_LINE:
            continue
        count += 1
        hashes.add(hash(_DIGITS.sub("#", line)))
    words = tuple(terms(text)) if with_terms else ()
    return Features(identifiers(text), frozenset(hashes), count, words)


@dataclass
class Valuation:
    """What folding sections of one context would lose."""

    base: list[float]  # weight × recency × density (× per-section relevance)
    keep: list[float]  # Π (1 - p) over identifiers only this section holds
    shared: list[tuple[str, ...]]  # identifiers other sections hold too
    p: dict[str, float]  # shared identifier -> chance it is needed again
    holders: dict[str, int]  # shared identifier -> sections holding it (digests not counted)
    exposed: list[float]  # Σ p × folded-before over identifiers only this section holds
    folded: Mapping[str, int]  # identifier -> sections holding it folded before
    exposure: float

    def region(self, i: int, j: int) -> float:
        """The value lost by folding sections ``[i, j)`` together."""
        inside: Counter[str] = Counter()
        for k in range(i, j):
            inside.update(self.shared[k])
        lost = {x for x, c in inside.items() if c >= self.holders[x]}
        value = 0.0
        exposed = 0.0
        for k in range(i, j):
            keep = self.keep[k]
            for x in self.shared[k]:
                if x in lost:
                    keep *= 1.0 - self.p[x]
            value += self.base[k] * (1.0 - keep)
            exposed += self.exposed[k]
        exposed += sum(self.p[x] * self.folded.get(x, 0) for x in lost)
        return value + self.exposure * exposed

    def section(self, i: int) -> float:
        """The score of section ``i``: the value lost if it alone were folded."""
        return self.region(i, i + 1)


class Scorer:
    """Scores the sections of one agent's context. Keeps per-section features between plans and
    remembers the identifiers of sections that left the context (folded, or removed)."""

    def __init__(self, params: ScoreParams | None = None) -> None:
        self.params = params or ScoreParams()
        self._cache: dict[str, tuple[int, Features]] = {}
        self.folded: Counter[str] = Counter()

    def features(self, sec: Section) -> Features:
        key = hash(sec.text)  # str caches its hash: O(1) after the first time
        hit = self._cache.get(sec.id)
        if hit is not None and hit[0] == key:
            return hit[1]
        f = features(sec.text, with_terms=self.params.relevance == "bm25")
        self._cache[sec.id] = (key, f)
        return f

    def _track(self, sections: Sequence[Section]) -> list[Features]:
        """Features of ``sections``; cached sections no longer present count as folded."""
        feats = [self.features(s) for s in sections]
        if len(self._cache) > len(sections):
            present = {s.id for s in sections}
            for sid in [k for k in self._cache if k not in present]:
                self.folded.update(self._cache.pop(sid)[1].idents)
        return feats

    def valuation(self, sections: Sequence[Section]) -> Valuation:
        p = self.params
        n = len(sections)
        feats = self._track(sections)
        ages = turn_ages(sections)
        dens = densities(feats, p.density_floor)
        base = [
            p.weights.get(s.priority, 1.0) * 0.5 ** (ages[i] / p.half_life_turns) * dens[i]
            for i, s in enumerate(sections)
        ]
        holders: Counter[str] = Counter()
        for s, f in zip(sections, feats, strict=True):
            if s.kind != "digest":
                holders.update(f.idents)
        if p.relevance == "mentions":
            prob = mentions(sections, feats, ages, p.mentions, holders, self.folded)
        else:
            prob = Mentions(p.mentions, holders, self.folded)
            focus = Focus.of(sections, feats, ages, p.focus_turns)
            if p.relevance == "bm25":
                rel = bm25_scores(feats, focus)
            elif p.relevance == "overlap":
                rel = overlap_scores(feats, focus)
            else:
                rel = [1.0] * n
            floor = p.relevance_floor
            base = [b * (floor + (1 - floor) * r) for b, r in zip(base, rel, strict=True)]
        keep: list[float] = []
        shared: list[tuple[str, ...]] = []
        exposed: list[float] = []
        pshared: dict[str, float] = {}
        for f in feats:
            k = 1.0
            e = 0.0
            mine: list[str] = []
            for x in f.idents:
                px = prob(x)
                if holders[x] > 1:
                    mine.append(x)
                    pshared[x] = px
                else:
                    k *= 1.0 - px
                    e += px * self.folded.get(x, 0)
            keep.append(k)
            shared.append(tuple(mine))
            exposed.append(e)
        held = {x: holders[x] for x in pshared}
        return Valuation(base, keep, shared, pshared, held, exposed, self.folded, p.exposure)

    def scores(self, sections: Sequence[Section], strategy: str = "optimistic") -> list[float]:
        """One score per section, in order: what folding it alone would lose (``recency``: its
        recency)."""
        if strategy == "recency":
            return [0.5 ** (a / self.params.half_life_turns) for a in turn_ages(sections)]
        v = self.valuation(sections)
        return [v.section(i) for i in range(len(sections))]


def turn_ages(sections: Sequence[Section]) -> list[int]:
    """For each section, how many LLM steps (turns) arrived after the one it belongs to."""
    steps = sum(1 for s in sections if s.kind in STEP_KINDS)
    out = []
    seen = 0
    for s in sections:
        if s.kind in STEP_KINDS:
            seen += 1
        out.append(max(0, steps - max(seen, 1)))
    return out


def densities(feats: Sequence[Features], floor: float) -> list[float]:
    """``max(floor, noise)`` for each section: few distinct lines repeated many times score lower.

    (Redundancy with other sections is handled per identifier: see the module docstring. A
    line-based redundancy factor on top of it was measured to raise regret, so there is none.)
    """
    return [max(floor, f.noise) for f in feats]


def score_params(c: CompactionConfig) -> ScoreParams:
    """The scoring parameters of a ``[compaction]`` config table."""
    weights = {
        "critical": c.weight_critical,
        "high": c.weight_high,
        "medium": c.weight_medium,
        "low": c.weight_low,
    }
    return ScoreParams(weights=weights, half_life_turns=c.half_life_turns, relevance=c.relevance)
