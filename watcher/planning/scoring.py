"""Value of sections: priority weight × relevance × recency × information density.

The value of folding a section away is the chance that the agent will need what it would lose
(regret, watcher.eval.regret), times a weight:

    score(s) = weight[priority] × recency × density × risk
    recency  = 2 ** (-age / half_life)          age in turns (LLM steps) since the section arrived
    density  = max(density_floor, noise)
    risk     = 1 - Π (1 - p(x)) over the identifiers x that would be lost

* **relevance** is ``p(x)`` (watcher.planning.relevance): the chance that the agent refers to identifier
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

import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ipc.sections import Section, text_key
from watcher.config.settings import CompactionConfig
from watcher.planning.features import Features, features
from watcher.planning.relevance import (
    RELEVANCE_METHODS,
    STEP_KINDS,
    Focus,
    MentionModel,
    Mentions,
    bm25_scores,
    mentions,
    overlap_scores,
)

DEFAULT_WEIGHTS: Mapping[str, float] = {"critical": 2.0, "high": 1.5, "medium": 1.0, "low": 0.5}


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
    evidence_sigmas: float = 1.0  # the value overrides the age order only by this many std devs

    def __post_init__(self) -> None:
        if self.relevance not in RELEVANCE_METHODS:
            known = ", ".join(RELEVANCE_METHODS)
            raise ValueError(f"relevance must be one of {known}, got {self.relevance!r}")
        if not self.half_life_turns > 0:
            raise ValueError(f"half_life_turns must be > 0, got {self.half_life_turns}")
        if any(w < 0 for w in self.weights.values()):
            raise ValueError("priority weights must be >= 0")
        if not self.evidence_sigmas >= 0:
            raise ValueError(f"evidence_sigmas must be >= 0, got {self.evidence_sigmas}")


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
    _memo: dict[tuple[int, int], float] = field(default_factory=dict, repr=False, compare=False)
    _pos: dict[str, list[int]] | None = field(default=None, repr=False, compare=False)
    _alone: list[float] | None = field(default=None, repr=False, compare=False)
    _var: list[float] | None = field(default=None, repr=False, compare=False)  # prefix sums

    def region(self, i: int, j: int) -> float:
        """The value lost by folding sections ``[i, j)`` together.

        An identifier is lost when every section holding it is inside (``holders``; a digest
        holding it counts towards that too, as before). Each section loses ``base × (1 - keep)``,
        its ``keep`` multiplied by ``1 - p`` of its lost identifiers (in the order of ``shared``);
        the sections' losses and exposures are summed in order, and then the exposure of the lost
        identifiers folded before (``p × folded``), in order of their first occurrence inside.
        """
        return self.regions(((i, j),))[0]

    def regions(self, windows: Sequence[tuple[int, int]]) -> list[float]:
        """:meth:`region` of each window, bit for bit, in one pass: the identifiers inside are
        counted by sliding (a window starting and ending no earlier than the one before it only
        adds and removes the sections in between), and a section none of whose identifiers is
        lost adds its loss computed once. Memoized per window: a valuation describes one context,
        which does not change under it."""
        memo = self._memo
        shared, holders = self.shared, self.holders
        inside: dict[str, int] = {}
        lost: set[str] = set()
        lo = hi = 0
        out: list[float] = []
        for i, j in windows:
            got = memo.get((i, j))
            if got is None:
                if i < lo or j < hi or i > hi:
                    inside.clear()
                    lost.clear()
                    lo = hi = i
                while hi < j:
                    for x in shared[hi]:
                        c = inside[x] = inside.get(x, 0) + 1
                        if c >= holders[x]:
                            lost.add(x)
                    hi += 1
                while lo < i:
                    for x in shared[lo]:
                        c = inside[x] = inside[x] - 1
                        if c < holders[x]:
                            lost.discard(x)
                    lo += 1
                got = memo[(i, j)] = self._value(i, j, lost)
            out.append(got)
        return out

    def _value(self, i: int, j: int, lost: set[str]) -> float:
        alone = self._alone
        if alone is None:
            alone = self._alone = [b * (1.0 - k) for b, k in zip(self.base, self.keep, strict=True)]
        exp = self.exposed
        value = 0.0
        exposed = 0.0
        if not lost:
            for k in range(i, j):
                value += alone[k]
                exposed += exp[k]
            return value + self.exposure * exposed
        pos = self._pos
        if pos is None:
            pos = self._pos = {}
            for k, xs in enumerate(self.shared):
                for x in xs:
                    pos.setdefault(x, []).append(k)
        p, folded, shared = self.p, self.folded, self.shared
        touched: set[int] = set()
        before: list[tuple[int, int, str]] = []  # lost and folded before: (first position, index, x)
        for x in lost:
            ks = pos[x]
            a = bisect_left(ks, i)
            touched.update(ks[a : bisect_left(ks, j, a)])
            if folded.get(x, 0):
                before.append((ks[a], shared[ks[a]].index(x), x))
        base, keeps = self.base, self.keep
        for k in range(i, j):
            if k in touched:
                keep = keeps[k]
                for x in shared[k]:
                    if x in lost:
                        keep *= 1.0 - p[x]
                value += base[k] * (1.0 - keep)
            else:
                value += alone[k]
            exposed += exp[k]
        if before:  # (an identifier never folded before adds exactly 0.0: left out)
            before.sort()
            exposed += sum(p[x] * folded.get(x, 0) for _, _, x in before)
        return value + self.exposure * exposed

    def section(self, i: int) -> float:
        """The score of section ``i``: the value lost if it alone were folded."""
        return self.region(i, i + 1)

    def spread(self, i: int, j: int) -> float:
        """The variance of the value of ``[i, j)`` read as a count of regretted sections: each
        section a Bernoulli trial whose chance is its own score (capped at 1). What one value can
        be told apart from another by (watcher.planning.planner: the age order decides unless the
        value says otherwise by more than its spread)."""
        var = self._var
        if var is None:
            var = [0.0]
            for x in self.regions([(k, k + 1) for k in range(len(self.base))]):  # one sliding pass
                r = min(1.0, x)
                var.append(var[-1] + r * (1.0 - r))
            self._var = var
        return var[j] - var[i]


class Scorer:
    """Scores the sections of one agent's context. Keeps per-section features between plans and
    remembers the identifiers of sections that left the context (folded, or removed).

    Sections are immutable per (id, text): features are cached by id and checked against the
    text's hash, so a plan computes them only for sections it has not seen (:meth:`prepare` can
    compute those ahead, a bounded slice at a time). The last valuation is kept too: a plan over
    an unchanged context (same sections, nothing folded since) reuses it, region values included.
    A scorer with a warm cache values a context exactly as a fresh one with the same ``folded``.
    """

    def __init__(self, params: ScoreParams | None = None) -> None:
        self.params = params or ScoreParams()
        self._cache: dict[str, tuple[int, Features]] = {}
        self.folded: Counter[str] = Counter()
        self._last: tuple[tuple[object, ...], Valuation] | None = None  # (context key, valuation)

    def features(self, sec: Section) -> Features:
        key = text_key(sec)  # O(1) after the first time, without unpacking a packed text
        hit = self._cache.get(sec.id)
        if hit is not None and hit[0] == key:
            return hit[1]
        f = features(sec.text, with_terms=self.with_terms)
        self._cache[sec.id] = (key, f)
        return f

    @property
    def with_terms(self) -> bool:
        """Do this scorer's features hold BM25 terms (watcher.planning.features.features)?"""
        return self.params.relevance == "bm25"

    def store(self, sections: Sequence[Section], feats: Sequence[Features]) -> None:
        """Cache ``feats[i]`` as the features of ``sections[i]``, computed elsewhere by
        watcher.planning.features.features(text, self.with_terms) (a worker process: the same
        function, so the same features)."""
        for s, f in zip(sections, feats, strict=True):
            self._cache[s.id] = (text_key(s), f)

    def missing(self, sections: Sequence[Section]) -> list[Section]:
        """The sections whose features are not cached yet."""
        cache = self._cache
        out = []
        for s in sections:
            hit = cache.get(s.id)
            if hit is None or hit[0] != text_key(s):
                out.append(s)
        return out

    def prepare(self, sections: Sequence[Section], seconds: float | None = None) -> int:
        """Compute and cache the features of sections not seen yet, for at most about ``seconds``
        (all of them if None); returns how many are still missing. A plan after this is cheaper
        by their cost, and values the context exactly as it would have without it."""
        todo = self.missing(sections)
        if seconds is None:
            for s in todo:
                self.features(s)
            return 0
        until = time.perf_counter() + seconds
        for k, s in enumerate(todo):
            self.features(s)
            if time.perf_counter() >= until:
                return len(todo) - k - 1
        return 0

    def _track(self, sections: Sequence[Section]) -> list[Features]:
        """Features of ``sections``; cached sections no longer present count as folded."""
        feats = [self.features(s) for s in sections]
        if len(self._cache) > len(sections):
            present = {s.id for s in sections}
            for sid in [k for k in self._cache if k not in present]:
                self.folded.update(self._cache.pop(sid)[1].idents)
        return feats

    def valuation(self, sections: Sequence[Section]) -> Valuation:
        feats = self._track(sections)  # first: it may fold what left the context
        key = (
            self.folded.total(),
            len(self.folded),
            *[(s.id, text_key(s), s.kind, s.priority, s.pinned) for s in sections],
        )
        last = self._last
        if last is not None and last[0] == key:
            return last[1]
        v = self._valuation(sections, feats)
        self._last = (key, v)
        return v

    def _valuation(self, sections: Sequence[Section], feats: list[Features]) -> Valuation:
        p = self.params
        n = len(sections)
        ages = turn_ages(sections)
        dens = densities(feats, p.density_floor)
        weights, half_life = p.weights, p.half_life_turns
        recency: dict[int, float] = {}
        base = []
        for i, s in enumerate(sections):
            r = recency.get(ages[i])
            if r is None:
                r = recency[ages[i]] = 0.5 ** (ages[i] / half_life)
            base.append(weights.get(s.priority, 1.0) * r * dens[i])
        counts: dict[str, int] = {}
        get = counts.get
        for s, f in zip(sections, feats, strict=True):
            if s.kind != "digest":
                for x in f.idents:
                    counts[x] = get(x, 0) + 1
        holders = Counter(counts)
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
        folded_get = self.folded.get
        for f in feats:
            k = 1.0
            e = 0.0
            mine: list[str] = []
            for x in f.idents:
                px = prob(x)
                if get(x, 0) > 1:
                    mine.append(x)
                    pshared[x] = px
                else:
                    k *= 1.0 - px
                    e += px * folded_get(x, 0)
            keep.append(k)
            shared.append(tuple(mine))
            exposed.append(e)
        held = {x: counts[x] for x in pshared}
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
