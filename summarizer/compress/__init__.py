"""Deterministic compressors for tool output, one per content kind.

Each compressor keeps what an agent needs from an old tool output (failures and summaries of a test
run, errors of a log, the changed lines of a diff, the outline of a file...) and replaces everything
else with an omission marker naming the archive reference, so the original can be recalled. All of
them are pure functions of their input: the same text always gives the same bytes, and every loop is
bounded so a 900k-character observation is handled in milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from summarizer.compress.clean import clean_text
from summarizer.compress.diff import compress_diff
from summarizer.compress.grep import compress_grep
from summarizer.compress.jsondoc import compress_json
from summarizer.compress.logs import LogPlan, compress_log, compress_test
from summarizer.compress.out import Compressed, omission
from summarizer.compress.outline import compress_file, compress_listing
from summarizer.compress.select import Budget
from summarizer.detect import ContentKind, Envelope, detect_body, split_envelope

__all__ = [
    "SMALL_INPUT",
    "Compressed",
    "Renderer",
    "binary_like",
    "compress",
    "head_tail",
    "omission",
    "rankable",
]


SMALL_INPUT = 1200  # texts this short are returned unchanged: a digest line would not be much shorter
_MAX_LINES = 200_000  # longer bodies lose their middle lines before compression (bounds the work)


_Compressor = Callable[[str, str], tuple[str, str, int]]
_COMPRESSORS: dict[ContentKind, _Compressor] = {
    "test": compress_test,
    "log": compress_log,
    "json": compress_json,
    "grep": compress_grep,
    "diff": compress_diff,
    "file": compress_file,
    "listing": compress_listing,
}


def _snap_head(head: str) -> str:
    cut = head.rfind("\n")
    return head[:cut] if cut >= len(head) // 2 else head


def _snap_tail(tail: str) -> str:
    cut = tail.find("\n")
    return tail[cut + 1 :] if 0 <= cut < len(tail) // 2 else tail


def _head_tail(text: str, max_chars: int, ref: str) -> tuple[str, int]:
    if len(text) <= max_chars:
        return text, 0
    budget = max_chars - len(omission(len(text), ref)) - 2  # two newlines around the marker
    if budget <= 0:
        return omission(len(text), ref), len(text)
    head_n = budget // 2
    head = _snap_head(text[:head_n])
    tail = _snap_tail(text[len(text) - (budget - head_n) :]) if budget > head_n else ""
    n = len(text) - len(head) - len(tail)
    return f"{head}\n{omission(n, ref)}\n{tail}", n


def head_tail(text: str, max_chars: int, ref: str) -> str:
    """`text` if it fits in `max_chars`, else its head and tail around an omission marker.

    Cuts fall on line boundaries when that keeps at least half of each part. The result is at most
    `max_chars` long, unless `max_chars` is smaller than the marker itself, in which case the result
    is just the marker.
    """
    return _head_tail(text, max_chars, ref)[0]


def _bound_lines(body: str, ref: str) -> tuple[str, int]:
    """Bound the per-line work: a body of more than _MAX_LINES lines loses its middle lines."""
    if body.count("\n") < _MAX_LINES:
        return body, 0
    lines = body.split("\n")
    half = _MAX_LINES // 2
    cut = sum(len(ln) + 1 for ln in lines[half:-half])
    return "\n".join([*lines[:half], omission(cut, ref), *lines[-half:]]), cut


_BINARY_SHARE = 0.1  # a body with this share of undecodable or control characters is not read
_NOT_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f\ufffd\ud800-\udfff]")


def binary_share(body: str, sample: int = 65_536) -> float:
    """The share of U+FFFD, lone surrogates (invalid UTF-8 kept by surrogateescape) and control
    characters (not tab, newline, carriage return or escape) in the start and end of `body`."""
    part = body if len(body) <= 2 * sample else body[:sample] + body[-sample:]
    return len(_NOT_TEXT.findall(part)) / len(part) if part else 0.0


def binary_like(text: str) -> bool:
    """Whether `text` is mostly not text (binary garbage, invalid UTF-8): nothing to read in it."""
    return binary_share(text) >= _BINARY_SHARE


def _wrap(env: Envelope, header: str, body: str) -> str:
    note = f"; {env.note}" if env.note else ""
    joint = "\n" if env.suffix and not env.suffix.startswith("\n") else ""
    return f"[{header}{note}]\n{env.prefix}{body}{joint}{env.suffix}"


class Renderer:
    """One tool output, prepared once (envelope, kind, and for logs and test runs the classified and
    tiered lines), rendered at any size: `compress` is `Renderer(...).render(max_chars)`."""

    def __init__(self, text: str, *, ref: str, kind: ContentKind | None = None) -> None:
        self.text = text
        self.ref = ref
        self.env = split_envelope(text)
        clean = clean_text(self.env.body) if kind is None and self.env.hint is None else None
        self.kind: ContentKind = kind or self.env.hint or detect_body(clean or "")
        big = len(text) > SMALL_INPUT
        self.binary = big and binary_like(self.env.body)  # whatever it was detected as
        self.active = big and (self.kind != "prose" or self.binary)
        self.body, self.cut = _bound_lines(self.env.body, ref) if self.active else ("", 0)
        budgeted = self.active and not self.binary and self.kind in ("log", "test")
        if budgeted and (clean is None or self.cut):
            clean = clean_text(self.body)
        self.plan = LogPlan(self.body, self.kind, clean or "") if budgeted else None
        self._natural: tuple[str, int, int] | None = None
        self.model_lines = 0  # in the last rendering: lines shown because the model ranked them

    def rank(self, scores: Mapping[int, float]) -> None:
        """Let the model's scores of some lines (by index in the body) order what the rules leave."""
        if self.plan is not None:
            self.plan.ranks = dict(scores)
            self._natural = None

    def scorable(self) -> list[tuple[int, str]]:
        """(index, line) of the body's lines worth the model's ranking, the most worth scoring first."""
        if self.plan is None:
            return []
        raw = self.plan.lines.raw
        return [(i, raw[i]) for i in self.plan.candidates()]

    def core_chars(self) -> int:
        """Characters the lines saying why a log or test run failed need (0 for other kinds)."""
        return self.plan.core_chars() if self.plan else 0

    def _candidate(self, max_chars: int | None) -> tuple[str, int, int]:
        """(rendering, dropped chars, lines the model's ranking added)."""
        natural = max_chars is None or self.plan is None  # other kinds ignore max_chars (cut after)
        if natural and self._natural is not None:
            return self._natural
        if self.binary:  # nothing to read in it: say what it is and where the archive keeps it
            share = f"{binary_share(self.body):.0%}"
            header = f"binary-like output: {len(self.body)} chars, {share} undecodable or control characters"
            found = _wrap(self.env, header, omission(len(self.body), self.ref)), len(self.body), 0
        elif self.plan is None:
            header, body, n = _COMPRESSORS[self.kind](self.body, self.ref)
            found = _wrap(self.env, header, body), n, 0
        else:
            limits = None if max_chars is None else Budget.at_most(max(0, max_chars - len(self.env.prefix)))
            for _ in range(8):  # fit the wrapped result: shrink the lines' budget by the overflow
                header, body, n = self.plan.compress(self.ref, limits)
                found = _wrap(self.env, header, body), n, self.plan.model_lines
                over = len(found[0]) - max_chars if max_chars is not None else 0
                if over <= 0 or limits is None or limits.core == 0:
                    break
                limits = Budget.at_most(max(0, min(len(body), limits.core) - over - 16))
        if natural:
            self._natural = found
        return found

    def render(self, max_chars: int | None = None) -> Compressed:
        out, dropped = self.text, 0
        self.model_lines = 0
        if self.active:
            candidate, n, model_lines = self._candidate(max_chars)
            if len(candidate) < len(self.text):
                out, dropped = candidate, n + self.cut + self.env.dropped
                self.model_lines = model_lines
        if max_chars is not None:
            out, n = _head_tail(out, max_chars, self.ref)
            dropped += n
        return Compressed(out, self.kind, min(dropped, len(self.text)))


def rankable(text: str) -> bool:
    """Whether `text` is a log or a test run large enough to be compressed: the tool outputs whose
    lines the model ranks in a digest (cheap: the kind is detected, the lines are not classified)."""
    if len(text) <= SMALL_INPUT:
        return False
    env = split_envelope(text)
    kind = env.hint or detect_body(clean_text(env.body))
    return kind in ("log", "test") and not binary_like(env.body)


def compress(
    text: str, *, ref: str, max_chars: int | None = None, kind: ContentKind | None = None
) -> Compressed:
    """Compress a tool output with the compressor for its kind (detected unless given).

    Prose and texts of at most SMALL_INPUT characters are kept as they are (unless `max_chars` forces a
    cut); a compression that would not shrink the text is discarded. Logs and test runs are compressed
    to fit `max_chars` by dropping whole lines of lower priority; any other result still longer than
    `max_chars` is cut to it with `head_tail`.
    """
    return Renderer(text, ref=ref, kind=kind).render(max_chars)
