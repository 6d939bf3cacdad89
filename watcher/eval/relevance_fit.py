"""Fit the ``mentions`` relevance model (watcher.planning.relevance.MentionModel) to trajectories.

The model's parameters are rates: how often the agent names an identifier again in a later turn,
by what the context says about it at a turn. :func:`measure` counts, at every turn of every
trajectory (the whole context in view, nothing folded), each identifier of the context once, in
one of three classes, and whether an agent-written section of a later turn names it:

* ``agent``: the agent itself wrote it, ``age`` turns ago (its youngest mention);
* ``goal``: only the current goal names it (watcher.planning.relevance.goal_indices);
* ``cold``: only tool output (and other non-agent sections) holds it, in ``holders`` sections.

:func:`fit` turns the rates into a model: ``floor`` = the rate at ages >= ``OLD_AGE``,
``amplitude`` = the rate at age 0 less the floor, ``half_life_turns`` = the half-life that best
fits the rates in between (least squares, weighted by count, on a grid); ``p_goal`` the goal
rate; ``p_cold`` the rate of cold identifiers with one holder. The shipped defaults are round
numbers close to the fit on all shared trajectories; ``compactd bench planner --loo`` fits on all
trajectories but one and plays the one left out with that fit (leave-one-trajectory-out), so the
figures it reports for a trajectory never used that trajectory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from watcher.eval.trajectories import Trajectory
from watcher.planning.identifiers import identifiers
from watcher.planning.relevance import STEP_KINDS, MentionModel, goal_indices

OLD_AGE = 18  # ages at and beyond this make the floor
HALF_LIVES = tuple(h / 2 for h in range(2, 61))  # 1 .. 30 turns


@dataclass
class Rates:
    """Counts per class: (identifier-turns, of which named again later)."""

    agent: dict[int, list[int]] = field(default_factory=dict)  # age (capped at OLD_AGE) -> counts
    goal: list[int] = field(default_factory=lambda: [0, 0])
    cold: dict[int, list[int]] = field(default_factory=dict)  # holders (capped at 4) -> counts

    @staticmethod
    def rate(c: Sequence[int]) -> float:
        return c[1] / c[0] if c[0] else 0.0


def _count(counts: dict[int, list[int]], key: int, hit: bool) -> None:
    c = counts.setdefault(key, [0, 0])
    c[0] += 1
    c[1] += hit


def measure(trajs: Sequence[Trajectory], rates: Rates | None = None) -> Rates:
    out = rates or Rates()
    for t in trajs:
        ids = {s.id: identifiers(s.text) for s in t.sections}
        refs = [frozenset().union(*(ids[s.id] for s in turn if s.kind in STEP_KINDS)) for turn in t.turns]
        later: list[frozenset[str]] = [frozenset()] * (len(t.turns) + 1)
        for k in range(len(t.turns) - 1, -1, -1):
            later[k] = later[k + 1] | refs[k]
        ctx = []
        youngest: dict[str, int] = {}  # identifier -> turn of the agent's latest mention
        for k, turn in enumerate(t.turns):
            ctx.extend(turn)
            for x in refs[k]:
                youngest[x] = k
            future = later[k + 1]
            goal = set().union(*(ids[ctx[i].id] for i in goal_indices(ctx)))
            holders: dict[str, int] = {}
            for s in ctx:
                if s.kind not in STEP_KINDS and s.kind != "digest":
                    for x in ids[s.id]:
                        holders[x] = holders.get(x, 0) + 1
            for x, at in youngest.items():
                _count(out.agent, min(k - at, OLD_AGE), x in future)
            for x, n in holders.items():
                if x in youngest:
                    continue
                if x in goal:
                    out.goal[0] += 1
                    out.goal[1] += x in future
                else:
                    _count(out.cold, min(n, 4), x in future)
    return out


def fit(rates: Rates, base: MentionModel | None = None) -> MentionModel:
    """The model whose rates are closest to ``rates`` (the cap on holders is kept from ``base``)."""
    m = base or MentionModel()
    floor = Rates.rate(rates.agent.get(OLD_AGE, [0, 0]))
    amplitude = max(Rates.rate(rates.agent.get(0, [0, 0])) - floor, 0.0)

    def err(h: float) -> float:
        total = 0.0
        for age, c in rates.agent.items():
            if age < OLD_AGE:
                total += c[0] * (floor + amplitude * 0.5 ** (age / h) - Rates.rate(c)) ** 2
        return total

    half_life = min(HALF_LIVES, key=err)
    return replace(
        m,
        floor=round(floor, 3),
        amplitude=round(amplitude, 3),
        half_life_turns=half_life,
        p_goal=round(Rates.rate(rates.goal), 3),
        p_cold=round(Rates.rate(rates.cold.get(1, [0, 0])), 3),
    )


def fit_on(trajs: Sequence[Trajectory], base: MentionModel | None = None) -> MentionModel:
    return fit(measure(trajs), base)
