"""One protocol for every way of choosing what to compact, and the four behind it.

A session (watcher.serve.session) gets its :class:`Policy` once, when its agent attaches (HELLO,
or a reload that changes the agent's ``planner``), and the compaction job asks it two things:
when to act (:meth:`Policy.trigger`) and what to fold (:meth:`Policy.plan`, pure: it runs in a
thread). The daemon never asks which policy it holds.

* ``optimistic`` -- the product's planner (watcher.planning.planner): the region that loses the
  least value plus cache cost, planned ahead of the high watermark by the growth expected while a
  digest is written (look-ahead);
* ``recency`` -- the same machinery with the age order as the only score (the regret baseline);
* ``reactive``, ``masking`` -- the replay baselines (watcher.planning.baselines), which act at a
  fixed usage and digest as they would on their own (no look-ahead).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from ipc.sections import Section
from watcher.planning.baselines import MaskPlan, plan_masking, plan_reactive
from watcher.planning.planner import DEFAULT_CACHE_WEIGHT, Plan, Watermarks, plan, trigger_tokens
from watcher.planning.scoring import Scorer

# What a policy plans: a region to digest (Plan), or tool outputs to mask (MaskPlan).
Planned = Plan | MaskPlan


@dataclass(frozen=True)
class PlanInputs:
    """What a plan depends on besides the sections and the watermarks."""

    fresh: int  # fresh turns kept verbatim ([compaction] fresh_turns)
    growth: int = 0  # tokens expected to arrive before a digest started now is ready (look-ahead)
    scorer: Scorer | None = None  # the agent's cached section features
    cache_weight: float = DEFAULT_CACHE_WEIGHT


class Policy(Protocol):
    """When to compact, and what."""

    @property
    def name(self) -> str: ...

    @property
    def plans_ahead(self) -> bool:
        """Plans before the high watermark by the expected growth, and so may digest without the
        model when the model's digest would come too late (the baselines digest as they would)."""
        ...

    @property
    def needs_features(self) -> bool:
        """Scores sections by their features (computed before the plan, a slice at a time)."""
        ...

    def trigger(self, marks: Watermarks, growth: int) -> int:
        """Compaction is considered once the context holds more than this many tokens."""
        ...

    def plan(self, sections: Sequence[Section], marks: Watermarks, inputs: PlanInputs) -> Planned | None:
        """What to fold in ``sections`` now; None if nothing (yet). Pure but for ``inputs.scorer``'s
        cache."""
        ...


@dataclass(frozen=True)
class Scored:
    """``optimistic`` and ``recency``: watcher.planning.planner.plan with look-ahead."""

    name: str
    plans_ahead: bool = True

    @property
    def needs_features(self) -> bool:
        return self.name != "recency"

    def trigger(self, marks: Watermarks, growth: int) -> int:
        return trigger_tokens(marks, growth)

    def plan(self, sections: Sequence[Section], marks: Watermarks, inputs: PlanInputs) -> Plan | None:
        return plan(
            sections,
            marks,
            inputs.fresh,
            strategy=self.name,
            scorer=inputs.scorer,
            growth=inputs.growth,
            cache_weight=inputs.cache_weight,
        )


@dataclass(frozen=True)
class Baseline:
    """``reactive`` (act once the next call would not fit: over the budget; fold the oldest
    history) and ``masking`` (act at the high watermark; old tool outputs become placeholders):
    a fixed trigger, no look-ahead, no features (watcher.planning.baselines)."""

    name: str
    acts_over: Callable[[Watermarks], int]  # the usage it acts above
    choose: Callable[[Sequence[Section], Watermarks, int], Planned | None]
    plans_ahead: bool = False
    needs_features: bool = False

    def trigger(self, marks: Watermarks, growth: int) -> int:
        return self.acts_over(marks)

    def plan(self, sections: Sequence[Section], marks: Watermarks, inputs: PlanInputs) -> Planned | None:
        return self.choose(sections, marks, inputs.fresh)


POLICIES: Final[dict[str, Policy]] = {
    "optimistic": Scored("optimistic"),
    "recency": Scored("recency"),
    "reactive": Baseline("reactive", lambda m: m.budget, plan_reactive),
    "masking": Baseline("masking", lambda m: m.high - 1, plan_masking),
}


def policy_for(name: str) -> Policy:
    """The policy called ``name`` (watcher.config.settings.REQUESTABLE_PLANNERS); ValueError if none."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"planner must be one of {', '.join(POLICIES)}, got {name!r}") from None
