"""Logs: error and warning lines with context, runs of same-shape lines collapsed."""

from __future__ import annotations

import bisect
import itertools
import re
from collections import Counter

from summarizer.compress.out import Out, omission

_DIGITS = re.compile(r"\d+")
_LOG_IMPORTANT = re.compile(
    r"(?i:\b(?:error|exception|traceback|fatal|critical|fail|failed|failure|warn|warning|panic|denied|"
    r"refused|aborted|timed out|timeout|segmentation fault|killed)\b)|\w(?:Error|Exception|Warning)\b"
)
_LOG_HEAD_RUNS = 5
_LOG_TAIL_RUNS = 12
_LOG_HINTS = (  # looked for in the lower-cased text: a cheap pre-filter for _LOG_IMPORTANT
    "error", "exception", "traceback", "fatal", "critical", "fail", "warn", "panic", "denied", "refused",
    "abort", "timed out", "timeout", "segmentation fault", "killed",
)  # fmt: skip
_LOG_IMPORTANT_MAX = 60
_LOG_NOVEL_MAX = 15


def _runs(shapes: list[str]) -> list[tuple[int, int]]:
    """Maximal [start, end) ranges of consecutive lines with the same shape."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(shapes) + 1):
        if i == len(shapes) or shapes[i] != shapes[start]:
            runs.append((start, i))
            start = i
    return runs


def _important_lines(body: str, lines: list[str]) -> set[int]:
    """Indices of error/warning lines: lines holding a hint word, confirmed by _LOG_IMPORTANT."""
    starts = list(itertools.accumulate((len(ln) + 1 for ln in lines[:-1]), initial=0))
    low = body.lower()
    candidates: set[int] = set()
    for word in _LOG_HINTS:
        pos = low.find(word)
        while pos >= 0:
            candidates.add(bisect.bisect_right(starts, pos) - 1)
            pos = low.find("\n", pos)  # one hit per line is enough
            pos = low.find(word, pos) if pos >= 0 else -1
    return {i for i in candidates if _LOG_IMPORTANT.search(lines[i], 0, 500)}


def _select_runs(
    lines: list[str], shapes: list[str], runs: list[tuple[int, int]], important_lines: set[int]
) -> tuple[list[bool], int]:
    n = len(runs)
    keep = [False] * n
    for r in [*range(min(_LOG_HEAD_RUNS, n)), *range(max(0, n - _LOG_TAIL_RUNS), n)]:
        keep[r] = True
    per_shape: Counter[str] = Counter()
    important = 0
    novel = 0
    seen: set[str] = set()
    for r, (start, _end) in enumerate(runs):
        shape = shapes[start]
        if start in important_lines and important < _LOG_IMPORTANT_MAX:
            per_shape[shape] += 1
            if per_shape[shape] <= 2:
                important += 1
                for c in range(max(0, r - 2), min(n, r + 3)):
                    keep[c] = True
        elif shape not in seen and novel < _LOG_NOVEL_MAX:
            novel += 1
            keep[r] = True
        seen.add(shape)
    return keep, important


def compress_log(body: str, ref: str) -> tuple[str, str, int]:
    lines = body.split("\n")
    shapes = _DIGITS.sub("#", body).split("\n")
    runs = _runs(shapes)
    keep, important = _select_runs(lines, shapes, runs, _important_lines(body, lines))
    out = Out(ref)
    collapsed = 0
    for (start, end), kept in zip(runs, keep, strict=True):
        if not kept:
            for line in lines[start:end]:
                out.drop(line)
            continue
        rest = sum(len(ln) + 1 for ln in lines[start + 1 : end])
        if end - start == 1 or rest <= len(omission(rest, ref)):
            for line in lines[start:end]:
                out.keep(line)
            continue
        out.keep(lines[start])
        out.lines[-1] += f" (×{end - start}) {omission(rest, ref)}"
        out.dropped += rest
        collapsed += 1
    header = f"log: {len(lines)} lines, {important} error/warning lines kept, {collapsed} repeats collapsed"
    return header, out.render(), out.dropped
