"""CILogBench cases and the benchmark's own text rule for "a required signal was kept".

The rule (LogDx-CI `tools/evaluate_signal_recall.py`, path B), written once here: normalize the text an
agent would see (strip ANSI CSI and OSC escapes, CRLF and CR to LF); a signal is kept when its `value`
(stripped), one of its `aliases`, or (stack locations) its `file` is a substring of that text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

DEFAULT_CASES: Final = Path(__file__).resolve().parents[4] / "shared" / "cilogbench"

# the benchmark's pattern, unchanged: CSI sequences and OSC strings (BEL or ST terminated)
_ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*(?:\x07|\x1b\\)")


class CaseError(ValueError):
    """A case folder is missing a file or holds malformed ground truth."""


def normalize(text: str) -> str:
    """What the scorer compares against: ANSI escapes stripped, CRLF and CR turned into LF."""
    return _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")


def probes(signal: dict[str, Any]) -> list[str]:
    """The strings any one of which, found verbatim, keeps `signal`."""
    found = [str(signal.get("value") or "").strip()]
    found += [str(a or "").strip() for a in signal.get("aliases") or []]
    found.append(str(signal.get("file") or "").strip())
    return [p for p in found if p]


def kept(signal: dict[str, Any], normalized: str) -> bool:
    """Whether `signal` survives in `normalized` (text already passed through `normalize`)."""
    return any(p in normalized for p in probes(signal))


@dataclass(frozen=True)
class Case:
    split: str
    name: str
    raw: str
    signals: tuple[dict[str, Any], ...]

    @property
    def critical(self) -> tuple[dict[str, Any], ...]:
        return tuple(s for s in self.signals if s.get("importance") == "critical")


def load_case(folder: Path, split: str) -> Case:
    try:
        raw = (folder / "raw.log").read_bytes().decode("utf-8", "replace")
        truth = json.loads((folder / "ground_truth.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CaseError(f"{folder}: {exc}") from exc
    signals = truth.get("required_signals") if isinstance(truth, dict) else None
    if not isinstance(signals, list) or not all(isinstance(s, dict) for s in signals):
        raise CaseError(f"{folder}: ground_truth.json has no list of required_signals")
    return Case(split, folder.name, raw, tuple(signals))


def find_cases(root: Path, only: Iterable[str] = ()) -> list[Case]:
    """Every case folder (raw.log + ground_truth.json) under `root`, sorted; the split is the first
    folder below `root` (or `root`'s own name for a flat folder). `only`: case or split names."""
    wanted = set(only)
    cases = []
    for log in sorted(root.rglob("raw.log")):
        folder = log.parent
        if not (folder / "ground_truth.json").is_file():
            continue
        rel = folder.relative_to(root).parts
        split = rel[0] if len(rel) >= 2 else root.name
        if wanted and folder.name not in wanted and split not in wanted:
            continue
        cases.append(load_case(folder, split))
    if not cases:
        raise CaseError(f"no case (raw.log + ground_truth.json) under {root}")
    return cases


@dataclass(frozen=True)
class Score:
    recall: float  # kept / required
    critical: float  # kept / required, critical signals only
    present_recall: float  # kept / required, over the signals the raw text itself holds
    present_critical: float
    missed: tuple[str, ...]  # the first probe of each missed signal that the raw text holds


def _share(hits: Sequence[bool]) -> float:
    return sum(hits) / len(hits) if hits else 1.0


def score(case: Case, text: str, raw_normalized: str) -> Score:
    shown = normalize(text)
    present = [kept(s, raw_normalized) for s in case.signals]
    hits = [kept(s, shown) for s in case.signals]
    crit = [s.get("importance") == "critical" for s in case.signals]
    lost = [s for s, h, p in zip(case.signals, hits, present, strict=True) if p and not h]
    missed = tuple((probes(s) or ["?"])[0] for s in lost)
    return Score(
        recall=_share(hits),
        critical=_share([h for h, c in zip(hits, crit, strict=True) if c]),
        present_recall=_share([h for h, p in zip(hits, present, strict=True) if p]),
        present_critical=_share([h for h, p, c in zip(hits, present, crit, strict=True) if p and c]),
        missed=missed,
    )
