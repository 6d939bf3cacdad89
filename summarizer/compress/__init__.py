"""Deterministic compressors for tool output, one per content kind.

Each compressor keeps what an agent needs from an old tool output (failures and summaries of a test
run, errors of a log, the changed lines of a diff, the outline of a file...) and replaces everything
else with an omission marker naming the archive reference, so the original can be recalled. All of
them are pure functions of their input: the same text always gives the same bytes, and every loop is
bounded so a 900k-character observation is handled in milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from summarizer.compress.clean import clean_text, uncoloured
from summarizer.compress.diff import compress_diff
from summarizer.compress.grep import compress_grep
from summarizer.compress.jsondoc import compress_json
from summarizer.compress.junit import compress_junit
from summarizer.compress.logs import LogPlan, compress_log, compress_test
from summarizer.compress.markup import compress_markdown, compress_page
from summarizer.compress.out import Compressed, omission
from summarizer.compress.outline import FileRead, FileSlice, compress_file, compress_listing
from summarizer.compress.select import Budget
from summarizer.compress.table import compress_table
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
_PAYLOAD_PROSE_CHARS = 1500  # a JSON document's prose payload shows this much of its head and tail


_Compressor = Callable[[str, str], tuple[str, str, int]]
_COMPRESSORS: dict[ContentKind, _Compressor] = {
    "test": compress_test,
    "log": compress_log,
    "json": compress_json,
    "grep": compress_grep,
    "diff": compress_diff,
    "file": compress_file,
    "listing": compress_listing,
    "page": compress_page,
    "table": compress_table,
    "markdown": compress_markdown,
    "junit": compress_junit,
}
_OUTLINED: dict[ContentKind, Callable[[str, str, int], tuple[str, str, int]]] = {
    "page": compress_page,
    "markdown": compress_markdown,
    "junit": compress_junit,
}  # documents whose outline is rendered again for a smaller room (Renderer._outline_in)


def _snap_head(head: str) -> str:
    """Cut at a line end, or else at a space (a word is never cut in two), when that keeps half."""
    for sep in ("\n", " "):
        cut = head.rfind(sep)
        if cut >= len(head) // 2:
            return head[:cut]
    return head


def _snap_tail(tail: str) -> str:
    for sep in ("\n", " "):
        cut = tail.find(sep)
        if 0 <= cut < len(tail) // 2:
            return tail[cut + 1 :]
    return tail


_MARKER_LINE = re.compile(r"^\s*\[… \d+ chars omitted; recall [^\]\s]+\]\s*$")


def _line_at(text: str, pos: int) -> tuple[int, int]:
    """(start, end) of the line of `text` holding position `pos` (end: its newline or the end)."""
    end = text.find("\n", pos)
    return text.rfind("\n", 0, pos) + 1, len(text) if end < 0 else end


def _whole_markers(text: str, head: str, tail: str) -> tuple[str, str]:
    """`head` and `tail` (a prefix and a suffix of `text`) without a piece of an omission marker: a
    marker line that a cut falls inside goes whole (the new marker stands for it). A text cut again
    (a rendering with markers of its own cut to a smaller room) would otherwise show a fragment such
    as ``recall d1#s00169]`` on a line of its own."""
    start, end = _line_at(text, len(head))
    if start < len(head) < end and _MARKER_LINE.match(text[start:end]):
        head = text[: max(0, start - 1)]
    cut = len(text) - len(tail)
    start, end = _line_at(text, cut)
    if tail and start < cut < end and _MARKER_LINE.match(text[start:end]):
        tail = text[end + 1 :]
    return head, tail


def _head_tail(text: str, max_chars: int, ref: str) -> tuple[str, int]:
    if len(text) <= max_chars:
        return text, 0
    budget = max_chars - len(omission(len(text), ref)) - 2  # two newlines around the marker
    if budget <= 0:
        return omission(len(text), ref), len(text)
    head_n = budget // 2
    head = _snap_head(text[:head_n])
    tail = _snap_tail(text[len(text) - (budget - head_n) :]) if budget > head_n else ""
    head, tail = _whole_markers(text, head, tail)
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
    tiered lines), rendered at any size: `compress` is `Renderer(...).render(max_chars)`.
    `tool_output`: the text is what a tool returned, so a file read that shows only its ends may
    show the model's lines instead (a slice: `sed -n 100,180p` cut it where it ends); False for what
    an agent or a user wrote, whose first and last lines are their own words."""

    def __init__(
        self, text: str, *, ref: str, kind: ContentKind | None = None, tool_output: bool = True
    ) -> None:
        self.text = text
        self.ref = ref
        self.env = split_envelope(text)
        clean = clean_text(self.env.body) if kind is None and self.env.hint is None else None
        self.kind: ContentKind = kind or self.env.hint or detect_body(clean or "")
        if self.kind == "markdown" and not tool_output:  # an agent's or a user's own words
            self.kind = "prose"
        big = len(text) > SMALL_INPUT
        self.binary = big and binary_like(self.env.body)  # whatever it was detected as
        self.active = big and (self.kind != "prose" or self.binary)
        self.body, self.lines_cut = _bound_lines(self.env.body, ref) if self.active else ("", 0)
        budgeted = self.active and not self.binary and self.kind in ("log", "test")
        if budgeted and (clean is None or self.lines_cut):
            clean = clean_text(self.body)
        self.plan = LogPlan(self.body, self.kind, clean or "") if budgeted else None
        # other kinds are compressed and shown without colour codes, as a log's lines are
        # (classify.Lines.shown): a coloured diff's `+` lines start with an escape, not a `+`
        self.colours_cut = 0
        if self.active and not self.binary and self.plan is None:
            plain = uncoloured(self.body)
            self.colours_cut, self.body = len(self.body) - len(plain), plain
        # a file read its compressor shows the ends of: the model ranks all its lines instead
        self._file = (
            FileRead.parse(self.body) if self.active and not self.binary and self.kind == "file" else None
        )
        self.slice: FileSlice | None = self._file.slice() if self._file is not None and tool_output else None
        self._natural: tuple[str, int, int] | None = None
        self._rules: tuple[str, str, int] | None = None
        self._plain_text: str | None = None  # (`_plain`, once)
        self.model_lines = 0  # in the last rendering: lines shown because the model ranked them
        self.ranked_lines = 0  # ... and all lines its ranking chose (the rules might have shown some)
        self.ranks: dict[int, float] = {}  # other kinds: the model's scores of lines of `base()`
        # (of a file slice: of its lines, FileSlice.lines)
        self.cut = False  # the last rendering dropped lines to fit its `max_chars`

    def rank(self, scores: Mapping[int, float]) -> None:
        """Let the model's scores of some lines order what is shown: for logs and test runs the lines
        the rules leave (by index in the body); for other kinds the lines of `base()` kept when it
        must be cut (instead of its head and tail); for a file slice its lines (FileSlice.lines),
        of which those of the highest scores are shown instead of its ends."""
        if self.plan is not None:
            self.plan.ranks = dict(scores)
        else:
            self.ranks = dict(scores)
        self._natural = None

    def base(self) -> str:
        """What this section shows when it is not cut: its compressed rendering, or its text."""
        if self.active:
            candidate = self._candidate(None)[0]
            if len(candidate) < len(self.text):
                return candidate
        return self.text

    def scorable(self) -> list[tuple[int, str]]:
        """(index, line) of the lines worth the model's ranking, the most worth scoring first. Logs
        and test runs: the body's lines the rules leave (compress.select.candidates). Other kinds:
        the lines of `base()` that could be shown (not its compressor header, kept always; not an
        omission marker; with a few letters), spread over the whole text (the order of a
        low-discrepancy sequence, so that a share of them samples the head, the middle and the end).
        A file slice: its lines (not only the ends its rendering shows), in the same order."""
        if self.plan is not None:
            shown = self.plan.lines.shown
            return [(i, shown[i]) for i in self.plan.candidates()]
        if self.slice is not None:
            lines, first = list(self.slice.lines), 0
        else:
            lines, first = self.base().split("\n"), 1 if self.active else 0
        ok = [i for i in range(first, len(lines)) if _rankable_line(lines[i])]
        ok.sort(key=lambda i: ((i - first) * _GOLDEN) % 1.0)
        return [(i, lines[i]) for i in ok]

    def ranked(self) -> list[tuple[float, str]]:
        """(score, line) of the lines the model ranked, best first: of `base()` (a log or test run: of
        its body). What a region too large for a line per section shows of it (summarizer.layout)."""
        if self.plan is not None:
            ranks: Mapping[int, float] = self.plan.ranks
            lines = self.plan.lines.shown
        elif self.slice is not None:
            ranks, lines = self.ranks, list(self.slice.lines)
        else:
            ranks, lines = self.ranks, self.base().split("\n")
        order = sorted((i for i in ranks if 0 <= i < len(lines)), key=lambda i: (-ranks[i], i))
        return [(ranks[i], lines[i]) for i in order]

    def best_line(self) -> str | None:
        """The line of `base()` the model ranked highest (None without ranks): what a section shown
        as one line shows instead of its first."""
        if self.plan is not None:  # (a log's ranks order the lines its rules leave, not one line)
            return None
        ranked = self.ranked()
        return ranked[0][1] if ranked else None

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
            header, body, n = self._compressed()
            found = _wrap(self.env, header, body), n, 0
            if self.slice is not None and self.ranks:
                found = self._sliced(header, body) or found
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

    def _compressed(self) -> tuple[str, str, int]:
        """The compressor's (header, body, dropped chars) for a kind without a log plan, once."""
        if self._rules is None:
            file = self._file
            if file:
                self._rules = file.render(len(self.body), self.ref)
            elif self.kind == "json":
                self._rules = compress_json(self.body, self.ref, self._payload)
            else:
                self._rules = _COMPRESSORS[self.kind](self.body, self.ref)
        return self._rules

    def _payload(self, text: str) -> tuple[str, int]:
        """A JSON document's text payload (a tool's output wrapped in JSON: compress.jsondoc) rendered
        as a tool output of its own, (rendering, dropped chars): compressed as what it is, or whole
        when short or not shrunk; prose or JSON again: its head and tail."""
        if len(text) <= SMALL_INPUT:
            return text, 0
        inner = Renderer(text, ref=self.ref)
        if inner.kind in ("json", "prose"):
            return _head_tail(text, _PAYLOAD_PROSE_CHARS, self.ref)
        out = inner.render()
        return out.text, out.dropped_chars

    def _plain(self) -> str:
        """What a file slice shows without the model's ranks (its ends), as `render` would."""
        if self._plain_text is None:
            header, body, _ = self._compressed()
            text = _wrap(self.env, header, body)
            self._plain_text = text if len(text) < len(self.text) else self.text
        return self._plain_text

    def _sliced(self, header: str, body: str) -> tuple[str, int, int] | None:
        """A file slice's rendering with the lines of the highest scores in the room of its ends
        (each run of other lines an omission marker), or None when that shows none but its ends."""
        assert self.slice is not None
        note = body.split("\n", 1)[0] if self.slice.noted else None  # as the compressor wrote it
        room = len(body) - (len(note) + 1 if note else 0)
        lines = self.slice.lines
        cut = _ranked_cut("\n".join(lines), self.ranks, room, self.ref, keep_first=False)
        if cut is None:
            return None
        text, dropped, chosen, _ = cut
        added = len(set(chosen) - self.slice.ends())
        if not added:
            return None
        return _wrap(self.env, header, f"{note}\n{text}" if note else text), dropped, added

    def _ranks_in(self, out: str) -> Mapping[int, float]:
        """The model's scores as indices of the lines of `out` (a rendering of this section)."""
        if self.slice is None:
            return self.ranks
        by_line = {self.slice.lines[i]: s for i, s in self.ranks.items() if 0 <= i < len(self.slice.lines)}
        return {j: by_line[ln] for j, ln in enumerate(out.split("\n")) if ln in by_line}

    def _outline_in(self, max_chars: int) -> tuple[str, int] | None:
        """A page or a Markdown document rendered for a room smaller than its natural one (its
        headings and the first lines under each: compress.markup), a JUnit report with less of each
        failure (compress.junit), (rendering, dropped chars), or None (another kind, or the room
        holds no outline)."""
        outlined = _OUTLINED.get(self.kind)
        if outlined is None or not self.active or self.binary:
            return None
        room = max_chars
        for _ in range(4):  # fit the wrapped result: shrink the room by the overflow
            header, body, n = outlined(self.body, self.ref, room)
            text = _wrap(self.env, header, body)
            if len(text) <= max_chars:
                return text, n
            room -= len(text) - max_chars + 16
            if room <= 0:
                break
        return None

    def render(self, max_chars: int | None = None) -> Compressed:
        out, dropped = self.text, 0
        self.model_lines = self.ranked_lines = 0
        self.cut = False
        if self.active:
            candidate, n, model_lines = self._candidate(max_chars)
            if len(candidate) < len(self.text):
                out, dropped = candidate, n + self.lines_cut + self.env.dropped + self.colours_cut
                self.model_lines = self.ranked_lines = model_lines
                self.cut = n > 0 and max_chars is not None and self.plan is not None
        if max_chars is not None and len(out) > max_chars:
            self.cut = True
            # the rules' cut (of a file slice: of its ends, as `out` may show the model's lines; of
            # a page or a Markdown document: its outline in the smaller room)
            fitted = self._outline_in(max_chars)
            if fitted is not None:  # its count is of the document, not of `out`
                rules, n = fitted[0], fitted[1] - (dropped - self.lines_cut - self.env.dropped)
            else:
                rules, n = _head_tail(self._plain() if self.slice is not None else out, max_chars, self.ref)
            ranked = _ranked_cut(out, self._ranks_in(out), max_chars, self.ref, keep_first=self.active)
            shown = set(rules.split("\n"))
            added = 0 if ranked is None else sum(1 for i in ranked[2] if ranked[3][i] not in shown)
            if ranked is not None and added:  # the model's choice differs from the head and tail
                out, n = ranked[0], ranked[1]
                self.model_lines, self.ranked_lines = added, len(ranked[2])
            else:
                out = rules
                if self.slice is not None:
                    self.model_lines = self.ranked_lines = 0
            dropped += n
        return Compressed(out, self.kind, min(dropped, len(self.text)))


_GOLDEN = 0.6180339887498949  # the low-discrepancy step of `Renderer.scorable`
_RANK_LINE_MAX = 2000  # longer lines are not ranked (a line is shown whole or not at all)
_WORDY = re.compile(r"[^\W\d_]{3,}")


def _rankable_line(line: str) -> bool:
    """A line worth a model's ranking outside logs: a few letters, not a marker, not huge."""
    s = line.strip()
    return 12 <= len(s) <= _RANK_LINE_MAX and bool(_WORDY.search(s)) and not _MARKER_LINE.match(s)


def _ranked_cut(
    text: str, ranks: Mapping[int, float], max_chars: int, ref: str, *, keep_first: bool
) -> tuple[str, int, list[int], list[str]] | None:
    """`text` cut to `max_chars` by the model's ranks instead of its head and tail: its first line
    when `keep_first` (a compressor's header), then the lines of the highest score that fit, whole
    and verbatim in their order, each run of dropped lines one omission marker. Returns (text,
    dropped chars, the indices of the ranked lines shown, the lines) or None when no ranked line fits."""
    lines = text.split("\n")
    ranked = sorted((i for i in ranks if 0 <= i < len(lines)), key=lambda i: (-ranks[i], i))
    if not ranked:
        return None
    prefix = [0]
    for ln in lines:
        prefix.append(prefix[-1] + len(ln) + 1)

    def size(kept: Sequence[int]) -> tuple[int, int]:
        """(chars of the rendering, chars dropped) with `kept` (sorted) shown."""
        total = dropped = 0
        prev = 0
        for k in [*kept, len(lines)]:
            gap = prefix[k] - prefix[prev]
            if gap:
                total += len(omission(gap, ref)) + 1
                dropped += gap
            if k < len(lines):
                total += len(lines[k]) + 1
            prev = k + 1
        return total - 1, dropped

    kept = [0] if keep_first else []
    if keep_first and size(kept)[0] > max_chars:
        return None
    chosen: list[int] = []
    for i in ranked:
        if i in kept:
            continue
        trial = sorted([*kept, i])
        if size(trial)[0] <= max_chars:
            kept = trial
            chosen.append(i)
    if not chosen:
        return None
    out: list[str] = []
    prev = 0
    for k in [*kept, len(lines)]:
        gap = prefix[k] - prefix[prev]
        if gap:
            out.append(omission(gap, ref))
        if k < len(lines):
            out.append(lines[k])
        prev = k + 1
    return "\n".join(out), size(kept)[1], sorted(chosen), lines


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
