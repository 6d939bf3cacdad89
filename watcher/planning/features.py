"""What the scorer and the relevance models read from one section's text: its identifiers, how many
of its lines are distinct (for noise) and, for BM25, its terms. Pure and cached per section by the
scorer, for every section of every agent's context: only the count of distinct lines is kept, not
the lines' hashes (a set of them was 12.6 of the daemon's ~80 MB of Python objects at 200 agents,
docs/BENCHMARKS.md "Where the knee's memory is"), and the identifiers as a tuple, not a frozenset
(14 MB of frozensets at 800 agents; every reader iterates them or intersects a set with them)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from watcher.planning.identifiers import identifiers, terms, window

_DIGITS = re.compile(r"\d+")
_LINES = re.compile(r"[\r\n]+")
_OTHER_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")  # str.splitlines breaks there too
_MIN_LINE = 8  # shorter lines (braces, blank-ish) say nothing about redundancy


@dataclass(frozen=True, slots=True)
class Features:
    idents: tuple[str, ...]  # distinct, sorted (the same in every process): a tuple takes ~5x less memory
    distinct: int  # distinct normalized lines (digits folded) of at least _MIN_LINE characters
    line_count: int  # lines of at least _MIN_LINE characters
    terms: tuple[str, ...] = ()  # only computed for the bm25 method

    @property
    def noise(self) -> float:
        """1.0 for text whose lines are all distinct, towards 0 for a few lines repeated."""
        if self.line_count < 4:
            return 1.0
        return math.sqrt(self.distinct / self.line_count)


def features(text: str, with_terms: bool = False) -> Features:
    """The features of one section's text (pure: the same text always gives the same features, in
    any process: the digest worker computes them for the daemon, watcher.serve.digestworker).

    Lines are split at runs of CR/LF (``str.splitlines`` when the text has no other line
    separator: the same non-empty lines, faster). The kept lines are folded all at once: a
    stripped line holds no line break and folding digits adds none, so joining and splitting
    them on LF gives each line folded."""
    win = window(text)
    lines = _LINES.split(win) if _OTHER_BREAKS.search(win) else win.splitlines()
    kept = [line for raw in lines if len(line := raw.strip()) >= _MIN_LINE]
    distinct = len(set(_DIGITS.sub("#", "\n".join(kept)).split("\n"))) if kept else 0
    words = tuple(terms(text)) if with_terms else ()
    return Features(tuple(sorted(identifiers(text))), distinct, len(kept), words)
