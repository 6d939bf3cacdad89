"""Per-agent settings: an agent's ``[agents.<id>]`` override, its HELLO request and ``[compaction]``,
resolved into the budget, reserve, policy, planner and watermarks it runs with."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Final

from watcher.config.schema import POLICIES, REQUESTABLE_PLANNERS, AgentOverride, CompactionConfig, Config


@dataclass(frozen=True)
class ResolvedAgent:
    budget: int
    reserve: float
    policy: str
    planner: str
    low_watermark: float

    @property
    def high_water_tokens(self) -> int:
        """Compaction starts above this many tokens."""
        return int(self.budget * (1 - self.reserve))

    @property
    def low_water_tokens(self) -> int:
        """Compaction aims for this many tokens."""
        return int(self.budget * self.low_watermark)


AUTO_LOW: Final = 0.7  # the low watermark when none is set ...
AUTO_BAND: Final = 0.15  # ... or this far below the high watermark, if that is lower
AUTO_LOW_FLOOR: Final = 0.05
AUTO_LOW_TOP: Final = 1 - AUTO_BAND - AUTO_LOW_FLOOR  # the largest reserve an agent may ask for then


def low_ratio(c: CompactionConfig, reserve: float) -> float:
    """The low watermark (a fraction of the budget) for an agent with this reserve: the configured
    one, or (auto) min(AUTO_LOW, 1 - reserve - AUTO_BAND), at least AUTO_LOW_FLOOR."""
    if c.low_watermark:
        return c.low_watermark
    return round(max(AUTO_LOW_FLOOR, min(AUTO_LOW, 1 - reserve - AUTO_BAND)), 6)


def resolve_agent(
    cfg: Config,
    agent_id: str,
    *,
    requested_budget: int | None = None,
    requested_reserve: float | None = None,
    requested_policy: str | None = None,
    requested_planner: str | None = None,
) -> ResolvedAgent:
    """An agent's effective settings. For each of budget, reserve, policy and planner: the
    ``[agents.<id>]`` override if the config has one for that key, else the client's request, else
    ``[compaction]``. A request that is used and invalid raises ValueError."""
    o = cfg.agents.get(agent_id, AgentOverride())
    c = cfg.compaction
    if o.budget is None and requested_budget is not None:
        ok = type(requested_budget) is int and requested_budget >= 1
        _require(ok, "budget", "a positive integer", requested_budget)
    if o.reserve is None and requested_reserve is not None:
        top = 1 - c.low_watermark if c.low_watermark else AUTO_LOW_TOP
        _require(0 < requested_reserve < top, "reserve", f"in (0, {top:g})", requested_reserve)
    if o.policy is None and requested_policy is not None:
        _require(requested_policy in POLICIES, "policy", "one of " + ", ".join(POLICIES), requested_policy)
    if o.planner is None and requested_planner is not None:
        ok = requested_planner in REQUESTABLE_PLANNERS
        _require(ok, "planner", "one of " + ", ".join(REQUESTABLE_PLANNERS), requested_planner)
    return ResolvedAgent(
        budget=_first(o.budget, requested_budget, default=c.default_budget),
        reserve=_first(o.reserve, requested_reserve, default=c.reserve),
        policy=_first(o.policy, requested_policy, default=c.policy),
        planner=_first(o.planner, requested_planner, default=c.planner),
        low_watermark=low_ratio(c, _first(o.reserve, requested_reserve, default=c.reserve)),
    )


def _require(ok: bool, name: str, what: str, got: object) -> None:
    if not ok:
        raise ValueError(f"requested {name} must be {what}, got {got!r}")


_T = typing.TypeVar("_T")


def _first(*values: _T | None, default: _T) -> _T:
    return next((v for v in values if v is not None), default)
