"""Relevance to the agent's current focus: what it is likely to need again.

The focus is the current goal (the latest user instruction, every critical user section such as
the task, every pinned non-system section) plus what the agent itself has been working on. Three
methods were measured by regret (docs/BENCHMARKS.md, "Planner and regret"); ``mentions`` won:

* ``mentions`` (default), per identifier: the chance that the agent refers to identifier ``x``
  again. An identifier the agent wrote itself ``age`` turns ago gets
  ``floor + amplitude * 2 ** (-age / half_life)``; one only in the goal gets ``p_goal``; any other
  (seen only in tool output) ``p_cold``. The defaults are round numbers close to the rates
  measured on the recorded trajectories (0.82 at age 0, 0.55 at 3-5 turns, 0.26 after 20 turns;
  goal-only 0.07, tool-output-only 0.03). Sections are then valued by what of this they would
  take with them (watcher.scoring).
* ``bm25``, per section: Okapi BM25 of the section's words against the focus's words (document
  frequencies from the current context), divided by the best section's score.
* ``overlap``, per section: ``1 - exp(-n / 2)`` for the ``n`` identifiers the section shares with
  the focus.
* ``none``: all sections equally relevant (ablation).

Everything here is computed from cached per-section features in one pass over the context, so it
follows the context incrementally: the last mention of each identifier moves as turns arrive.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ipc.sections import Section

if TYPE_CHECKING:
    from watcher.scoring import Features

STEP_KINDS: Final = frozenset({"assistant", "tool_call"})  # what the agent itself wrote
RELEVANCE_METHODS: Final = ("mentions", "bm25", "overlap", "none")


@dataclass(frozen=True)
class MentionModel:
    floor: float = 0.25
    amplitude: float = 0.55
    half_life_turns: float = 6.0
    p_goal: float = 0.07
    p_cold: float = 0.03


def goal_indices(sections: Sequence[Section]) -> list[int]:
    """The current goal: critical user sections, pinned non-system sections, the latest user
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


def mention_probabilities(
    sections: Sequence[Section], feats: Sequence[Features], ages: Sequence[int], model: MentionModel
) -> dict[str, float]:
    """p(the agent refers to x again) for every identifier above ``p_cold`` (the hot ones)."""
    youngest: dict[str, int] = {}
    for i, s in enumerate(sections):
        if s.kind in STEP_KINDS:
            age = ages[i]
            for x in feats[i].idents:
                if age < youngest.get(x, 1 << 30):
                    youngest[x] = age
    p: dict[str, float] = {}
    for i in goal_indices(sections):
        for x in feats[i].idents:
            p[x] = model.p_goal
    for x, age in youngest.items():
        p[x] = max(p.get(x, 0.0), model.floor + model.amplitude * 0.5 ** (age / model.half_life_turns))
    return {x: v for x, v in p.items() if v > model.p_cold}


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
            idents |= feats[i].idents
            words.update(feats[i].terms)
        return cls(frozenset(idents), frozenset(words))


def overlap_scores(feats: Sequence[Features], focus: Focus) -> list[float]:
    return [1.0 - math.exp(-len(f.idents & focus.idents) / 2.0) for f in feats]


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
