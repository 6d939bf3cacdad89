"""Relevance to the agent's current focus: how likely it is to need an identifier again.

The focus is the current goal (the latest user instruction, every critical user section such as
the task, every pinned non-system section) plus what the agent itself has been working on. The
methods were compared by regret (docs/BENCHMARKS.md, "Planner and regret"); ``mentions`` won:

* ``mentions`` (default), per identifier ``x``: the chance that the agent refers to ``x`` again.
  If the agent itself wrote ``x`` ``age`` turns ago: ``floor + amplitude * 2 ** (-age / half_life)``;
  if only the goal names it: ``p_goal``; otherwise (seen only in tool output)
  ``p_cold * min(n, cold_cap)`` for ``n`` sections holding it now or folded before. The defaults
  are round numbers close to the rates measured on the recorded trajectories: 0.82 at age 0, 0.55
  at 3-5 turns, 0.26 after 20 turns; 0.07 for goal-only; 0.02 per holder up to 0.09 for
  tool-output-only identifiers. watcher.eval.relevance_fit measures the rates and fits the model
  (on all 12 shared trajectories: floor 0.27, amplitude 0.54, half-life 6 turns, goal 0.08, cold
  0.02); ``compactd bench planner --loo`` plays each trajectory with a fit on the others.
* ``bm25``, per section: Okapi BM25 of the section's words against the focus's words (document
  frequencies from the current context), divided by the best section's score; every identifier
  then counts as ordinary (``p_cold``).
* ``overlap``, per section: ``1 - exp(-n / 2)`` for the ``n`` identifiers the section shares with
  the focus; identifiers as for ``bm25``.
* ``none``: every section equally relevant (ablation).

Everything is computed from cached per-section features in one pass over the context: it follows
the context as turns arrive (the last mention of each identifier moves forward).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ipc.sections import Section
from watcher.planning.features import Features

STEP_KINDS: Final = frozenset({"assistant", "tool_call"})  # what the agent itself wrote
RELEVANCE_METHODS: Final = ("mentions", "bm25", "overlap", "none")


@dataclass(frozen=True)
class MentionModel:
    floor: float = 0.25
    amplitude: float = 0.55
    half_life_turns: float = 6.0
    p_goal: float = 0.07
    p_cold: float = 0.02
    cold_cap: int = 4


def goal_indices(sections: Sequence[Section]) -> list[int]:
    """The current goal: critical user sections, pinned non-system sections, and the latest user
    instruction (a user section of priority critical or high)."""
    out: list[int] = []
    latest = -1
    for i, s in enumerate(sections):
        if s.kind == "user" and s.priority in ("critical", "high"):
            latest = i
            if s.priority == "critical":
                out.append(i)
        elif s.pinned and s.kind != "system":
            out.append(i)
    if latest >= 0 and latest not in out:
        out.append(latest)
    return out


class Mentions:
    """p(x) for the ``mentions`` method (and the ordinary-identifier rate for the others)."""

    def __init__(
        self,
        model: MentionModel,
        holders: Mapping[str, int],
        folded: Mapping[str, int],
        youngest: Mapping[str, int] | None = None,
        goal: frozenset[str] = frozenset(),
    ) -> None:
        self.model = model
        self.holders = holders
        self.folded = folded
        self.youngest = youngest or {}
        self.goal = goal
        self._cache: dict[str, float] = {}

    def __call__(self, x: str) -> float:
        p = self._cache.get(x)
        if p is None:
            m = self.model
            age = self.youngest.get(x)
            if age is not None:
                p = m.floor + m.amplitude * 0.5 ** (age / m.half_life_turns)
            elif x in self.goal:
                p = m.p_goal
            else:
                p = m.p_cold * min(self.holders.get(x, 0) + self.folded.get(x, 0), m.cold_cap)
            self._cache[x] = p
        return p


def mentions(
    sections: Sequence[Section],
    feats: Sequence[Features],
    ages: Sequence[int],
    model: MentionModel,
    holders: Mapping[str, int],
    folded: Mapping[str, int],
) -> Mentions:
    youngest: dict[str, int] = {}
    for i, s in enumerate(sections):
        if s.kind in STEP_KINDS:
            age = ages[i]
            for x in feats[i].idents:
                if age < youngest.get(x, 1 << 30):
                    youngest[x] = age
    goal: set[str] = set()
    for i in goal_indices(sections):
        goal.update(feats[i].idents)
    return Mentions(model, holders, folded, youngest, frozenset(goal))


@dataclass(frozen=True)
class Focus:
    """The focus as identifiers and words, for the per-section methods."""

    idents: frozenset[str]
    terms: frozenset[str]

    @classmethod
    def of(
        cls, sections: Sequence[Section], feats: Sequence[Features], ages: Sequence[int], focus_turns: int
    ) -> Focus:
        chosen = goal_indices(sections)
        chosen += [i for i, s in enumerate(sections) if s.kind in STEP_KINDS and ages[i] < focus_turns]
        idents: set[str] = set()
        words: set[str] = set()
        for i in chosen:
            idents.update(feats[i].idents)
            words.update(feats[i].terms)
        return cls(frozenset(idents), frozenset(words))


def overlap_scores(feats: Sequence[Features], focus: Focus) -> list[float]:
    return [1.0 - math.exp(-len(focus.idents.intersection(f.idents)) / 2.0) for f in feats]


def bm25_scores(feats: Sequence[Features], focus: Focus, k1: float = 1.2, b: float = 0.75) -> list[float]:
    n = len(feats)
    if not n or not focus.terms:
        return [0.0] * n
    df: Counter[str] = Counter()
    counts = []
    for f in feats:
        c = Counter(t for t in f.terms if t in focus.terms)
        counts.append(c)
        df.update(c.keys())
    avg = sum(len(f.terms) for f in feats) / n or 1.0
    raw = []
    for f, c in zip(feats, counts, strict=True):
        norm = k1 * (1 - b + b * len(f.terms) / avg)
        s = 0.0
        for t, tf in c.items():
            idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            s += idf * tf * (k1 + 1) / (tf + norm)
        raw.append(s)
    top = max(raw) or 1.0
    return [r / top for r in raw]
