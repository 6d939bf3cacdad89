"""Value of sections: priority weight × relevance × recency × information density.

A section's score is what folding it away would lose, in "expected regretted sections":

    score(s) = weight[priority] × recency × risk
    recency  = 2 ** (-age / half_life)          age in turns (LLM steps) since the section arrived
    risk     = 1 - (1 - p_cold) ** n_novel × Π (1 - p(x)) over the focus identifiers x that only s holds

*Relevance* is ``p(x)`` (watcher.relevance): the chance that the agent refers to identifier ``x``
again, high for what it wrote about lately, lower for the goal, lowest for identifiers only seen in
tool output. *Information density* is which identifiers would actually be lost: only those no
other section holds count, and only the ``n_novel`` ordinary identifiers no *later* section repeats.
So the first of two reads of a file, a test run that was re-run, near-duplicate output and noise
(progress bars, repeated log lines: few distinct identifiers) score low; a section that alone
names what the agent is working on scores high.

Regions are valued as a whole (:meth:`Valuation.region`): an identifier is lost only when every
section holding it is in the region, so folding both copies of a file costs what folding the only
copy costs. The value of a region never decreases when it grows.

The per-section methods ``bm25``, ``overlap`` and ``none`` (measured against ``mentions``) use
``weight × recency × (floor + (1 - floor) × relevance) × risk`` with every identifier ordinary.
The ``recency`` strategy values a section by its recency alone: the baseline for regret.

Per-section features are computed once and cached by section id and text: a plan costs
O(sections + identifiers), and ingesting a delta costs nothing here.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ipc.sections import Section
from watcher.identifiers import identifiers, terms, window
from watcher.relevance import (
    RELEVANCE_METHODS,
    STEP_KINDS,
    Focus,
    MentionModel,
    bm25_scores,
    mention_probabilities,
    overlap_scores,
)

DEFAULT_WEIGHTS: Mapping[str, float] = {"critical": 1.0, "high": 0.8, "medium": 0.5, "low": 0.25}
_DIGITS = re.compile(r"\d+")
_MIN_LINE = 8  # shorter lines (braces, blank-ish) say nothing about redundancy


@dataclass(frozen=True)
class ScoreParams:
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    half_life_turns: float = 24.0
    relevance: str = "mentions"  # mentions | bm25 | overlap | none
    mentions: MentionModel = field(default_factory=MentionModel)
    relevance_floor: float = 0.2  # per-section methods only
    focus_turns: int = 3  # per-section methods: the agent's last N turns are part of the focus

    def __post_init__(self) -> None:
        if self.relevance not in RELEVANCE_METHODS:
            raise ValueError(f"relevance must be one of {', '.join(RELEVANCE_METHODS)}, got {self.relevance!r}")
        if not self.half_life_turns > 0:
            raise ValueError(f"half_life_turns must be > 0, got {self.half_life_turns}")


@dataclass(frozen=True, slots=True)
class Features:
    idents: frozenset[str]
    lines: frozenset[int]  # hashes of distinct normalized lines (digits folded)
    line_count: int  # lines of at least _MIN_LINE characters
    terms: tuple[str, ...]

    @property
    def noise(self) -> float:
        """1.0 for text whose lines are all distinct, towards 0 for a few lines repeated."""
        if self.line_count < 4:
            return 1.0
        return math.sqrt(len(self.lines) / self.line_count)


def features(text: str) -> Features:
    hashes: set[int] = set()
    count = 0
    for raw in re.split(r"[\r\n]+", window(text)):
        line = raw.strip()
        if len(line) < _MIN_LINE:
            continue
        count += 1
        hashes.add(hash(_DIGITS.sub("#", line)))
    return Features(identifiers(text), frozenset(hashes), count, tuple(terms(text)))


@dataclass
class Valuation:
    """What folding sections of one context would lose."""

    base: list[float]  # weight × recency (× per-section relevance): the value of losing it all
    keep: list[float]  # chance that none of its ordinary novel identifiers is needed again
    hot: list[tuple[str, ...]]  # its focus identifiers
    p: dict[str, float]  # focus identifier -> chance it is needed again
    holders: dict[str, int]  # focus identifier -> sections holding it (digests not counted)

    def _value(self, i: int, lost: set[str] | frozenset[str]) -> float:
        keep = self.keep[i]
        for x in self.hot[i]:
            if x in lost:
                keep *= 1.0 - self.p[x]
        return self.base[i] * (1.0 - keep)

    def section(self, i: int) -> float:
        """The score of section ``i``: the value lost if it alone were folded."""
        lost = {x for x in self.hot[i] if self.holders[x] <= 1}
        return self._value(i, lost)

    def region(self, i: int, j: int) -> float:
        """The value lost by folding sections ``[i, j)`` together."""
        inside: Counter[str] = Counter()
        for k in range(i, j):
            inside.update(self.hot[k])
        lost = {x for x, c in inside.items() if c >= self.holders[x]}
        return sum(self._value(k, lost) for k in range(i, j))


class Scorer:
    """Scores the sections of one agent's context; keeps per-section features between plans."""

    def __init__(self, params: ScoreParams | None = None) -> None:
        self.params = params or ScoreParams()
        self._cache: dict[str, tuple[int, Features]] = {}

    def features(self, sec: Section) -> Features:
        key = hash(sec.text)  # str caches its hash: O(1) after the first time
        hit = self._cache.get(sec.id)
        if hit is not None and hit[0] == key:
            return hit[1]
        f = features(sec.text)
        self._cache[sec.id] = (key, f)
        return f

    def _forget_missing(self, present: Sequence[Section]) -> None:
        if len(self._cache) > 2 * len(present) + 64:
            keep = {s.id for s in present}
            self._cache = {k: v for k, v in self._cache.items() if k in keep}

    def valuation(self, sections: Sequence[Section], strategy: str = "optimistic") -> Valuation:
        p = self.params
        n = len(sections)
        ages = turn_ages(sections)
        rec = [0.5 ** (a / p.half_life_turns) for a in ages]
        if strategy == "recency":
            return Valuation(rec, [0.0] * n, [()] * n, {}, {})
        feats = [self.features(s) for s in sections]
        self._forget_missing(sections)
        base = [p.weights.get(s.priority, 0.5) * rec[i] for i, s in enumerate(sections)]
        if p.relevance == "mentions":
            probs = mention_probabilities(sections, feats, ages, p.mentions)
        else:
            probs = {}
            focus = Focus.of(sections, feats, ages, p.focus_turns)
            rel = {
                "bm25": lambda: bm25_scores(feats, focus),
                "overlap": lambda: overlap_scores(feats, focus),
                "none": lambda: [1.0] * n,
            }[p.relevance]()
            base = [b * (p.relevance_floor + (1 - p.relevance_floor) * r) for b, r in zip(base, rel, strict=True)]
        hot: list[tuple[str, ...]] = []
        holders: Counter[str] = Counter()
        for s, f in zip(sections, feats, strict=True):
            mine = tuple(sorted(f.idents.intersection(probs))) if probs else ()
            hot.append(mine)
            if s.kind != "digest":
                holders.update(mine)
        novel = novel_counts(feats, probs)
        q = 1.0 - p.mentions.p_cold
        keep = [q**c for c in novel]
        return Valuation(base, keep, hot, probs, dict(holders))

    def scores(self, sections: Sequence[Section], strategy: str = "optimistic") -> list[float]:
        """One score per section, in order (what folding it alone would lose)."""
        v = self.valuation(sections, strategy)
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


def novel_counts(feats: Sequence[Features], hot: Mapping[str, float]) -> list[float]:
    """Ordinary (not hot) identifiers of each section that no later section repeats, scaled down
    by the share of the section's lines that later sections repeat and by its noise."""
    later_ids: set[str] = set()
    later_lines: set[int] = set()
    out = [0.0] * len(feats)
    for i in range(len(feats) - 1, -1, -1):
        f = feats[i]
        fresh_ids = [x for x in f.idents if x not in later_ids and x not in hot]
        line_share = 1.0 - len(f.lines & later_lines) / len(f.lines) if f.lines else 1.0
        out[i] = len(fresh_ids) * min(line_share, f.noise)
        later_ids |= f.idents
        later_lines |= f.lines
    return out
