"""`compactd bench select`: does the model's ranking keep more of what matters than a rule's?

Ground truth: the CILogBench cases (../shared/cilogbench, real CI failure logs with human-written
required signals; scoring rule in its SOURCES.md: a signal is kept when its value, an alias or its
file is a substring of the ANSI-stripped text). For each case the log's lines are ranked and the best
lines are kept, whole and verbatim (a leading timestamp dropped), within 1/8 of the log's tokens
(counted without the timestamps, so every method gets the same, smaller, budget). Methods:

* ``tail``: the last lines (recency);
* ``grep``: lines matching the benchmark's own failure regex with 3 lines before and 8 after,
  newest match first, then the tail (the published grep baseline, inside a budget);
* ``grep+tail``: the regex's match lines first, newest first, then the tail (the deterministic twin
  of the hybrids below: same must-keep lines, recency ranks the rest);
* ``self_info``: the model's mean surprisal per line (summarizer.select, one prefill);
* ``goal_gain``: how much more likely a line becomes given GOAL (a second prefill);
* ``goal_info``: self-information plus goal gain;
* ``grep+self_info``, ``grep+goal_info``: the regex's match lines first, newest first (deterministic
  structure keeps the failures), the model ranks the rest;
* ``grepwin+self_info``: grep's whole windows first (the match and 3 lines before, 8 after, newest
  match first), the model ranks the rest (where ``grep`` falls back to the tail).

Speed: scoring tok/s against the same machine's prefill tok/s (the digest engine's plain prefill of
the same text), in RUNS interleaved rounds (median and range). Cases whose text exceeds
``max_case_tokens`` are listed as skipped (scoring costs one prefill per pass: ~1 ms per token here).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from summarizer.engine import EngineSettings, LlamaEngine
from summarizer.gguf import ModelError
from summarizer.select import NEUTRAL_PREFIX, LineScores, line_text, score_lines, select, verbatim
from summarizer.weights import normalize as normalize_weights
from watcher.eval.bench import cilog
from watcher.eval.bench.cilog import DEFAULT_CASES
from watcher.eval.bench.goals import BenchError, Goal, judge, spread

DEFAULT_GOAL: Final = "find why the CI job failed"
GREP_RE = re.compile(r"error|failed|failure|traceback|exception|assert|panic|exit code|##\[error\]", re.I)
MODEL_METHODS: Final = (
    "self_info",
    "goal_gain",
    "goal_info",
    "grep+self_info",
    "grep+goal_info",
    "grepwin+self_info",
)
RULE_METHODS: Final = ("tail", "grep", "grep+tail")
RECALL_MARGIN: Final = 0.05  # the goal: the model keeps >= 0.05 more signal recall


@dataclass(frozen=True)
class SelectBenchSettings:
    model: str
    cases: Path = DEFAULT_CASES
    goal: str = DEFAULT_GOAL
    fraction: float = 1 / 8
    max_case_tokens: int = 30_000
    runs: int = 3
    weights: str = "q4_0"
    n_threads: int = 0


@dataclass(frozen=True)
class Case:
    split: str
    name: str
    lines: tuple[str, ...]  # the log as the agent sees it (cilog.normalize), line by line
    signals: tuple[dict[str, Any], ...]


def load_cases(root: Path) -> list[Case]:
    try:
        found = cilog.find_cases(root)
    except cilog.CaseError as exc:
        raise BenchError(str(exc)) from exc
    return [Case(c.split, c.name, tuple(cilog.normalize(c.raw).split("\n")), c.signals) for c in found]


def recall(text: str, signals: Sequence[dict[str, Any]], critical: bool = False) -> float | None:
    """The benchmark's text rule (watcher.eval.bench.cilog), over all or the critical signals."""
    wanted = [s for s in signals if s.get("importance") == "critical" or not critical]
    if not wanted:
        return None
    shown = cilog.normalize(text)
    return sum(1 for s in wanted if cilog.kept(s, shown)) / len(wanted)


def rule_ranking(texts: Sequence[str], method: str) -> list[float]:
    """Scores of the deterministic rankings (higher is kept first)."""
    n = len(texts)
    recency = [i / max(1, n) for i in range(n)]
    if method == "tail":
        return recency
    score = list(recency)
    for i in range(n):
        if GREP_RE.search(texts[i]):
            for j in range(max(0, i - 3), min(n, i + 9)):
                score[j] = max(score[j], 1.0 + i / max(1, n))  # the newest match's window first
    return score


def rankings(sc: LineScores) -> dict[str, tuple[list[float], list[int]]]:
    """Every method's (scores, must-keep lines)."""
    info = list(sc.self_information)
    gain = list(sc.gain or [0.0] * len(info))
    both = [a + b for a, b in zip(info, gain, strict=True)]
    matches = [i for i in reversed(range(len(sc.texts))) if GREP_RE.search(sc.texts[i])]
    return {
        "tail": (rule_ranking(sc.texts, "tail"), []),
        "grep": (rule_ranking(sc.texts, "grep"), []),
        "grep+tail": (rule_ranking(sc.texts, "tail"), matches),
        "self_info": (info, []),
        "goal_gain": (gain, []),
        "goal_info": (both, []),
        "grep+self_info": (info, matches),
        "grep+goal_info": (both, matches),
        "grepwin+self_info": (info, windows(sc.texts)),
    }


def windows(texts: Sequence[str]) -> list[int]:
    """The lines of grep's windows (3 before, 8 after each match), newest match first."""
    out: list[int] = []
    seen: set[int] = set()
    n = len(texts)
    for i in reversed(range(n)):
        if GREP_RE.search(texts[i]):
            for j in range(max(0, i - 3), min(n, i + 9)):
                if j not in seen:
                    seen.add(j)
                    out.append(j)
    return out


async def _speed(engine: LlamaEngine, texts: Sequence[str], runs: int) -> dict[str, Any]:
    """Interleaved rounds: the engine's plain prefill of ~1800 tokens, then scoring them."""
    pieces: list[str] = []
    total = 0
    for t in texts:
        if total > 1800:
            break
        pieces.append(t + "\n")
        total += engine.count_tokens(t) + 1
    data = "".join(pieces)
    prefill, scoring = [], []
    for _ in range(runs):
        g = await engine.generate(NEUTRAL_PREFIX, data, "", max_tokens=1, timeout_s=600)
        prefill.append((g.prompt_tokens - g.reused_tokens) / g.prefill_s)
        s = await engine.score(NEUTRAL_PREFIX, pieces, timeout_s=600)
        scoring.append(s.evaluated / s.seconds)
    ratio = [s / p for s, p in zip(scoring, prefill, strict=True)]
    return {
        "tokens": total,
        "prefill_tps": spread(list(prefill)),
        "score_tps": spread(list(scoring)),
        "score_over_prefill": spread(list(ratio)),
    }


async def run_select_bench(settings: SelectBenchSettings, progress: Callable[[str], None]) -> dict[str, Any]:
    es = EngineSettings(
        settings.model, weights=normalize_weights(settings.weights), n_threads=settings.n_threads
    )
    try:
        engine = await asyncio.to_thread(LlamaEngine, es)
    except ModelError as exc:
        raise BenchError(str(exc)) from exc
    try:
        cases = load_cases(settings.cases)
        per_case: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        for case in cases:
            size = sum(engine.count_tokens(line_text(ln)) + 1 for ln in case.lines)
            if settings.max_case_tokens and size > settings.max_case_tokens:
                skipped.append({"case": f"{case.split}/{case.name}", "tokens": size})
                continue
            t0 = time.perf_counter()
            sc = await score_lines(engine, case.lines, settings.goal)
            progress(
                f"{case.split}/{case.name}: {size} tokens scored twice in {time.perf_counter() - t0:.1f} s"
            )
            per_case.append(_case_figures(case, sc, settings.fraction))
        speed = await _speed(
            engine, [line_text(ln) for c in cases for ln in c.lines if ln.strip()], settings.runs
        )
    finally:
        engine.close()
    return _report(settings, per_case, skipped, speed)


def _case_figures(case: Case, sc: LineScores, fraction: float) -> dict[str, Any]:
    budget = int(sum(sc.tokens) * fraction)
    out: dict[str, Any] = {"case": f"{case.split}/{case.name}", "split": case.split, "tokens": sum(sc.tokens)}
    out["budget"] = budget
    out["signals"] = len(case.signals)
    out["score_tps"] = round(sc.scored_tokens / sc.seconds, 1) if sc.seconds else 0.0
    methods: dict[str, Any] = {}
    for name, (scores, must) in rankings(sc).items():
        kept = select(sc.texts, sc.tokens, scores, budget, must)
        text = "\n".join(sc.texts[i] for i in kept)
        methods[name] = {
            "recall": recall(text, case.signals),
            "critical_recall": recall(text, case.signals, critical=True),
            "tokens": sum(sc.tokens[i] for i in kept),
            "verbatim": verbatim(case.lines, sc.texts, kept),
        }
    out["methods"] = methods
    return out


def _macro(cases: Sequence[dict[str, Any]], method: str, key: str) -> float | None:
    vals = [c["methods"][method][key] for c in cases if c["methods"][method][key] is not None]
    return round(sum(vals) / len(vals), 4) if vals else None


def _report(
    settings: SelectBenchSettings,
    cases: list[dict[str, Any]],
    skipped: list[dict[str, Any]],
    speed: dict[str, Any],
) -> dict[str, Any]:
    splits = sorted({c["split"] for c in cases})
    table: dict[str, Any] = {}
    for m in (*RULE_METHODS, *MODEL_METHODS):
        row: dict[str, Any] = {
            "all": _macro(cases, m, "recall"),
            "critical": _macro(cases, m, "critical_recall"),
        }
        for s in splits:
            row[s] = _macro([c for c in cases if c["split"] == s], m, "recall")
        table[m] = row
    best_rule = max((table[m]["all"] or 0.0) for m in RULE_METHODS)
    best_model = max((table[m]["all"] or 0.0) for m in MODEL_METHODS)
    result: dict[str, Any] = {
        "model": settings.model,
        "weights": settings.weights or "as shipped",
        "goal_text": settings.goal,
        "fraction": settings.fraction,
        "cases_measured": len(cases),
        "cases_skipped": skipped,
        "recall": table,
        "speed": speed,
        "cases": cases,
    }
    verbatim = all(m["verbatim"] for c in cases for m in c["methods"].values())
    return judge(
        result,
        [
            Goal(
                "best model method's recall - best rule's",
                round(best_model - best_rule, 4),
                ">=",
                RECALL_MARGIN,
            ),
            Goal("scoring rate / prefill rate (median)", speed["score_over_prefill"]["median"], ">=", 0.5),
            # no case measured: nothing was checked
            Goal("every selection a verbatim quote", verbatim if cases else None, "==", True),
            Goal("cases skipped (too large)", len(skipped), "==", 0),
        ],
    )
