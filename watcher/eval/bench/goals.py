"""What every `compactd bench` shares: its error, its goals, median-and-range figures, and its output.

A goal is a named comparison of one measured figure with a target. :func:`judge` turns a list of
goals into the common report keys::

    "goals": {name: {"target": ">= 0.5", "measured": 0.61, "met": true}},
    "goals_met": true,
    "missed": [],

A goal whose figure was not measured (``None``: no model job in a model run, no original checked in
a crash run, zero samples) is *missed*, with ``"not exercised"`` as the reason: a bench never claims
what it did not see. A bench with no goal at all misses too. :func:`emit` writes the JSON, prints
it, names every missed goal on stderr and returns the exit code (1 if any goal was missed).
"""

from __future__ import annotations

import json
import operator
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from watcher.eval.scorecard import spread

__all__ = ["EXIT_MISSED", "EXIT_OK", "BenchError", "Goal", "emit", "exercised", "in_range", "judge", "spread"]

EXIT_OK: Final = 0
EXIT_MISSED: Final = 1

_OPS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    ">": operator.gt,
    "<": operator.lt,
}


class BenchError(RuntimeError):
    """A benchmark cannot run (bad settings or input, the daemon under test failed); says why."""


@dataclass(frozen=True)
class Goal:
    """``measured OP target``; ``measured=None`` means the bench did not exercise it (missed)."""

    name: str
    measured: Any
    op: str
    target: Any

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"unknown goal operator {self.op!r}")

    @property
    def met(self) -> bool:
        if self.measured is None or (isinstance(self.measured, float) and self.measured != self.measured):
            return False
        return bool(_OPS[self.op](self.measured, self.target))

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "target": f"{self.op} {self.target}",
            "measured": self.measured,
            "met": self.met,
        }
        if self.measured is None:
            out["why"] = "not exercised"
        return out


def in_range(**values: tuple[float, float, float]) -> None:
    """Check settings: ``name=(value, lowest, highest)``; ValueError names the option (``--name``)."""
    for name, (value, lo, hi) in values.items():
        if not lo <= value <= hi:
            raise ValueError(f"--{name.replace('_', '-')} must be in {lo:g}..{hi:g}, not {value:g}")


def exercised(value: Any, condition: bool) -> Any:
    """``value`` if the bench exercised what it measures, else None (the goal is then missed)."""
    return value if condition else None


def judge(result: dict[str, Any], goals: Sequence[Goal]) -> dict[str, Any]:
    """Add ``goals``, ``goals_met`` and ``missed`` to ``result`` (and return it)."""
    result["goals"] = {g.name: g.report() for g in goals}
    result["missed"] = [g.name for g in goals if not g.met] if goals else ["(no goal evaluated)"]
    result["goals_met"] = not result["missed"]
    return result


def emit(result: dict[str, Any], json_path: str | Path | None, quiet: bool = False) -> int:
    """Write ``result`` as JSON to ``json_path`` (if any), print it (all of it unless ``quiet``),
    name the missed goals on stderr; the exit code is 1 if a goal was missed (or none judged)."""
    text = json.dumps(result, indent=2, sort_keys=True)
    if json_path:
        Path(json_path).write_text(text + "\n", encoding="utf-8")
    if quiet and json_path:
        print(json.dumps({"goals": result.get("goals"), "missed": result.get("missed")}, sort_keys=True))
    else:
        print(text)
    if "goals_met" not in result:
        print("no goal was evaluated: counted as missed", file=sys.stderr)
        return EXIT_MISSED
    for name in result.get("missed", []):
        g = result.get("goals", {}).get(name, {})
        why = g.get("why") or f"measured {g.get('measured')!r}"
        print(f"goal missed: {name} (target {g.get('target')}, {why})", file=sys.stderr)
    return EXIT_OK if result["goals_met"] else EXIT_MISSED
