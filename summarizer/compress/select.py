"""Choose the lines of a build or test log to show, by priority, within a character budget.

What a line costs and shows is the line without its leading timestamps and colour codes
(`Lines.shown`): half of a CI log's tokens are stamps that say nothing about the failure (the recall
reference gives them back).

Every line gets a tier (0 = always shown first); lines are taken tier by tier until the budget is
spent, whole lines only: a kept line is never cut. Within a tier, the failures closest to the end and
to the start of the log come first (the verdict and the first error), and a failure's block (the
indented lines after it, its location lines) comes with it.

0. the verdict: CI error annotations (`##[error]...`), the last line of the log, the final test
   summary, the job's name;
1. failure lines (the ends of each run of them, the first two of each kind) with the start of their
   blocks, the header and script of a failing CI step (a script line that fails the step itself,
   `exit 1`, `core.setFailed(...)`, `echo "::error::..."`, right after the header) and its output
   before the error (nearest first), the log's last lines, marks a test runner's parser adds;
2. grep-like context around failures (3 before, 8 after, not across a blank line), the failing
   step's command and settings, the rest of a failure's block, the log's last paragraph (up to ten
   lines; without a failing CI step, whose error is the verdict);
3. lines that merely mention an error word (outside set-up steps), repeated failures, the log's
   first lines;
4. the CI step headers (an outline).

Tiers 0-1 fill `Budget.core`, tier 2 up to `Budget.context`, and tiers 3-4 only add `Budget.fill`
(a log with little to say stays short).

With the model (`ranks`: a score per line, summarizer.select's self-information), tiers 0-2 are
chosen as above, then the lines the model scored (tiers 3-4 and the lines no rule marked) go by
score, highest first, within the same room tiers 3-4 get without it: structure keeps what must never
go, the model ranks the rest (filling the whole budget instead cost 11-24% more tokens on CILogBench
for no recall: docs/BENCHMARKS.md). `candidates` says which lines are worth scoring first.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from summarizer.compress.classify import CI_ERROR, STEP, TALLY, Lines, indent, setup_lines, step_spans
from summarizer.compress.clean import kind_of, shape
from summarizer.compress.out import Out, omission

NEVER = 99
HUGE_LINE = 4000  # longer lines are kept only when they carry a failure and fit; never cut
_PER_SHAPE = 2  # failure lines of one kind (clean.kind_of) in tier 1; the rest go to tier 3
_RUN_HEAD, _RUN_TAIL = 6, 3  # failure lines at each end of a run that are shown first
_BLOCK_MAX = 12  # continuation lines that follow a failure line in its block (tier 2) ...
_BLOCK_FIRST = 2  # ... of which the first ones are in tier 1 (the innermost frames of a stack)
_FRAMES_MAX = 60  # lines of a failure's stack searched for the failing test's own frame (_test_frame)
# a location in a test file: JUnit's `(LedgerTest.java:60)` (not JUnit's own classes, such as
# `TestMethodTestDescriptor`), `test_ledger.py", line 12`, Go's `ledger_test.go:12`, Jest's
# `ledger.test.ts:32:38`, rspec's `ledger_spec.rb:8`, or in a test directory
# (`test/config/get.ts:32:38`, Node.js's `test/common/debugger.js:92:28`)
_TEST_FILE = re.compile(
    r"\b[A-Z]\w*(?:Tests?|TestCase|IT)\.(?:java|kt|scala|groovy|cs|swift|php):\d+"
    r"|\b(?:test_\w+|\w+_test)\.py(?::\d+|\", line \d+)|\w_test\.go:\d+"
    r"|\.(?:test|spec)\.[cm]?[jt]sx?:\d+|\w_(?:spec|test)\.rb:\d+"
    r"|(?<![\w.-])(?:tests?|__tests__|specs?)[/\\][^\s:()\"']*\.\w+(?::\d+|\", line \d+)"
)
_STEP_TAIL = 30  # lines before a CI step's error annotation
_SCRIPT_MAX = 200  # lines of a step's `script` input searched for the line that fails the step
_CONTEXT_MIN, _FILL_MIN = 1000, 300  # chars that context and other lines may take at least
_MARKER = 48  # what an omission marker costs, roughly
# a line of a CI step's script that fails the step itself: `exit 1`, `exit "$rc"`, `false`,
# `core.setFailed(...)`, `process.exit(2)`, `sys.exit(1)`, `raise`, `throw`, and the workflow command
# that writes the step's error annotation (`echo "::error::Doc build failed"`)
_FAILS = re.compile(
    r"\s*(?:exit\s+(?:[1-9]\d*|\"?\$)|false\s*(?:[;#]|$)"
    r"|.*\b(?:core\.setFailed\(|process\.exit\(\s*[1-9]|sys\.exit\(\s*[1-9\"'])|raise\s|throw\s)"
    r"|.*::error\b"
)


@dataclass(frozen=True)
class Budget:
    """Characters the shown lines may take: in all (`core`: tiers 0-1), with context (tier 2), and
    what tiers 3-4 may add on top of what the others took (`fill`, within `core` too)."""

    core: int
    context: int
    fill: int

    @classmethod
    def at_most(cls, chars: int) -> Budget:
        return cls(chars, chars, chars)


def default_budget(size: int) -> Budget:
    """How much of a log of `size` characters to show when the caller gives no limit: what says
    why it failed first (up to half of a small log), context and other lines while they are cheap."""
    core = max(1500, min(20_000, size // 2))
    return Budget(core, max(800, min(20_000, size // 5)), max(300, min(5000, size // 20)))


class _Tiers:
    def __init__(self, n: int) -> None:
        self.tier = [NEVER] * n
        self.anchor = list(range(n))  # the failure line a context line belongs to
        self.order = list(range(n))  # among the lines of one anchor and tier, smaller first

    def mark(self, i: int, tier: int, anchor: int | None = None, order: int | None = None) -> None:
        if 0 <= i < len(self.tier) and tier < self.tier[i]:
            self.tier[i] = tier
            self.anchor[i] = i if anchor is None else anchor
            self.order[i] = i if order is None else order

    def span(self, lo: int, hi: int, tier: int, anchor: int | None = None) -> None:
        for i in range(max(0, lo), min(len(self.tier), hi)):
            self.mark(i, tier, anchor)


def _block_end(lines: Lines, i: int) -> int:
    """The line after the block a failure line at `i` opens: more-indented or gutter lines (across
    a blank line when the block goes on after it)."""
    base = indent(lines.clean[i])
    j = i + 1
    stop = min(len(lines.clean), i + 1 + _BLOCK_MAX)
    while j < stop:
        ln = lines.clean[j]
        s = ln.lstrip()
        if not s:  # a blank line inside a block (jest, rustc) when more-indented lines follow
            nxt = lines.clean[j + 1] if j + 1 < len(lines.clean) else ""
            if nxt.strip() and indent(nxt) > base and not lines.failure[j + 1]:
                j += 1
                continue
            break
        if lines.failure[j]:
            break
        if indent(ln) <= base and not s.startswith(("|", "-->", "= ", "at ", "^", "~")):
            break
        j += 1
    return j


def _test_frame(lines: Lines, i: int) -> int | None:
    """The first line of the stack under failure line `i` that is in a test file (_TEST_FILE): the
    failing test's own line, however many of the assertion library's frames come first (JUnit's
    are six), within _FRAMES_MAX lines; None when the stack names no test file."""
    base = indent(lines.clean[i])
    stop = min(len(lines.clean), i + 1 + _FRAMES_MAX)
    for j in range(i + 1, stop):
        ln = lines.clean[j]
        s = ln.lstrip()
        if not s:  # a blank line inside the block (jest's) when more-indented lines follow
            nxt = lines.clean[j + 1] if j + 1 < stop else ""
            if nxt.strip() and indent(nxt) > base:
                continue
            return None
        if lines.failure[j] or (indent(ln) <= base and not s.startswith("at ")):
            return None
        if _TEST_FILE.search(ln, 0, 400):
            return j
    return None


def _paragraph(clean: list[str], i: int, before: int, after: int) -> tuple[int, int]:
    """[lo, hi) around line i: up to `before` lines back and `after` on, not across a blank line."""
    lo = i
    while lo > max(0, i - before) and clean[lo - 1].strip():
        lo -= 1
    hi = i + 1
    while hi < min(len(clean), i + after + 1) and clean[hi].strip():
        hi += 1
    return lo, hi


def _failure_runs(failure: list[bool]) -> list[list[int]]:
    """Failure lines grouped into runs (at most one other line between two of a run)."""
    runs: list[list[int]] = []
    for i, is_failure in enumerate(failure):
        if is_failure:
            if runs and i - runs[-1][-1] <= 2:
                runs[-1].append(i)
            else:
                runs.append([i])
    return runs


def _mark_failures(lines: Lines, t: _Tiers) -> None:
    """A run's first and last failure lines (and the first few of each shape) in tier 1 with their
    blocks and context; the middle of long runs and repeated shapes in tier 3."""
    seen: Counter[str] = Counter()
    for run in _failure_runs(lines.failure):
        ends = {*run[:_RUN_HEAD], *run[-_RUN_TAIL:]}
        for i in run:
            key = kind_of(lines.clean[i][:300])
            seen[key] += 1
            if (i not in ends and not TALLY.search(lines.clean[i], 0, 400)) or seen[key] > _PER_SHAPE:
                t.mark(i, 3, run[0])
                continue
            t.mark(i, 1, run[0])
            t.mark(i - 1, 1, run[0])
            end = _block_end(lines, i)
            t.span(i + 1, min(end, i + 1 + _BLOCK_FIRST), 1, run[0])
            t.span(i + 1, end, 2, run[0])
            lo, hi = _paragraph(lines.clean, i, 3, 8)
            t.span(lo, hi, 2, run[0])
            frame = _test_frame(lines, i)
            if frame is not None:
                t.mark(frame, 1, run[0])


def _script_input(lines: Lines, settings: int, group_end: int) -> range:
    """The lines of a step's `script` input (actions/github-script: the script is an input, listed
    under `with:` after the step's name, where `core.setFailed(...)` fails the step), if any."""
    if not lines.clean[settings].startswith("with:"):
        return range(0)
    for j in range(settings + 1, min(group_end, settings + 40)):
        if lines.clean[j].startswith("  script:"):
            return range(j, min(group_end, j + _SCRIPT_MAX))
    return range(0)


def _mark_ci(lines: Lines, t: _Tiers) -> tuple[set[int], bool]:
    """CI structure: the verdict annotations, failing steps' headers, commands and last lines.
    Returns the lines of set-up steps (checkout, setup-*, caches), whose mentions are noise, and
    whether a CI step failed."""
    failed = False
    spans = step_spans(lines.clean)
    setup = setup_lines(lines.clean, spans)
    for i, ln in enumerate(lines.clean[:400]):
        if ln.startswith("Complete job name:"):
            t.mark(i, 0)
            break
    for start, end in spans:
        errors = [i for i in range(start, end) if CI_ERROR.match(lines.clean[i])]
        for e in errors:  # first the step's name and command, then its output from the error back
            failed = True
            t.mark(e, 0)
            group_end = next(
                (j for j in range(start, end) if lines.clean[j].startswith("##[endgroup]")), start
            )
            settings = next(
                (
                    j
                    for j in range(start, group_end)
                    if lines.clean[j].startswith(("shell: ", "with:", "env:"))
                ),
                group_end,
            )  # the runner lists the step's shell, inputs and environment after its script
            script = [*range(start + 1, min(settings, start + 60))]
            script += _script_input(lines, settings, group_end)
            for j in script:
                if _FAILS.match(lines.clean[j]):  # the script's own failure: next
                    t.mark(j, 1, e, 4)
            for k, j in enumerate(range(start, min(settings, start + 7))):
                t.mark(j, 1, e, 3 if k == 0 else 4 * k + 1)  # the name after the nearest output line
            t.span(start + 1, min(group_end, start + 60), 2, e)
            body = [j for j in range(group_end + 1, e) if lines.clean[j].strip()]
            for k, j in enumerate(reversed(body[-_STEP_TAIL:])):
                t.mark(j, 1, e, 2 * k)
    return setup, failed


def _mark_outline(lines: Lines, t: _Tiers, setup: set[int], ci_failed: bool) -> None:
    """The log's end (unless a failing CI step already gave the verdict: after it come only the
    runner's post-job steps), its first lines, step headers and lines mentioning errors."""
    nonempty = [i for i, ln in enumerate(lines.clean) if ln.strip()]
    end = [] if ci_failed else [i for i in nonempty if not lines.advice[i]]
    for i in end[-1:]:
        t.mark(i, 0)
    for i in end[-3:]:
        t.mark(i, 1)
    if end:
        lo, _ = _paragraph(lines.clean, end[-1], 10, 0)
        t.span(lo, end[-1], 2)
    for i in nonempty[:3]:
        t.mark(i, 3)
    for i, ln in enumerate(lines.clean):
        if CI_ERROR.match(ln):
            t.mark(i, 0)
        elif STEP.match(ln):
            t.mark(i, 4)
        elif lines.mention[i] and not lines.passing[i] and i not in setup:
            t.mark(i, 3)
            t.mark(i + 1, 3, i)


def plan(lines: Lines, extra: Iterable[tuple[int, int]] = ()) -> _Tiers:
    """Tiers for every line; `extra` adds (line, tier) marks from a format-specific parser."""
    t = _Tiers(len(lines.clean))
    for i, tier in extra:  # failure lines are tiered by _mark_failures (runs, shapes), but a verdict
        if tier == 0 or not lines.failure[i]:  # (a test runner's final tally: `1 failed`, `1 failing`)
            t.mark(i, tier)
    setup, ci_failed = _mark_ci(lines, t)
    _mark_failures(lines, t)
    _mark_outline(lines, t, setup, ci_failed)
    for i, advice in enumerate(lines.advice):
        if advice:  # "[ERROR] Re-run Maven using the -X switch", "##[endgroup]": no failure's context
            t.tier[i] = NEVER
    return t


def _order(t: _Tiers) -> list[int]:
    """Candidate lines by (tier, anchor taken from the ends inwards, order within the anchor)."""
    anchors = sorted({t.anchor[i] for i, tier in enumerate(t.tier) if tier < NEVER})
    rank: dict[int, int] = {}
    lo, hi, k = 0, len(anchors) - 1, 0
    while lo <= hi:
        rank[anchors[hi]] = k
        k += 1
        if lo < hi:
            rank[anchors[lo]] = k
            k += 1
        lo, hi = lo + 1, hi - 1
    cands = [i for i, tier in enumerate(t.tier) if tier < NEVER]
    return sorted(cands, key=lambda i: (t.tier[i], rank[t.anchor[i]], t.order[i]))


def candidates(lines: Lines, t: _Tiers) -> list[int]:
    """The lines a model may rank (tiers 3-4 and the lines no rule marked; not blank, not huge), the
    most worth scoring first: tiers 3-4 in their order, then the others nearest a line of tiers 0-2
    (a failure's surroundings), later lines first among equals (the end of a log says more)."""
    marked = [i for i, tier in enumerate(t.tier) if tier <= 2]

    def distance(i: int) -> int:
        k = bisect_left(marked, i)
        near = [abs(marked[j] - i) for j in (k - 1, k) if 0 <= j < len(marked)]
        return min(near, default=len(t.tier) - i)

    first = [i for i in _order(t) if t.tier[i] >= 3]
    rest = [i for i, tier in enumerate(t.tier) if tier == NEVER]
    rest.sort(key=lambda i: (distance(i), -i))
    return [i for i in (*first, *rest) if lines.clean[i].strip() and len(lines.raw[i]) < HUGE_LINE]


def choose(lines: Lines, t: _Tiers, limits: Budget, ranks: Mapping[int, float] | None = None) -> list[bool]:
    """Which lines to show within `limits`; with `ranks`, the model's order after tiers 0-2."""
    n = len(lines.raw)
    keep = [False] * n
    used = 0
    core_used: int | None = None  # what tiers 0-1 took, once tier 2 starts
    filled: int | None = None  # what tiers 0-2 took, once tier 3 starts
    order = _order(t)
    seen: set[str] = set()
    if ranks:  # tiers 0-2, then the model's lines by score, then the other tiers 3-4 lines
        ranked = sorted((i for i in ranks if t.tier[i] >= 3), key=lambda i: (-ranks[i], -i))
        order = [i for i in order if t.tier[i] <= 2] + ranked + [i for i in order if t.tier[i] >= 3]
    for i in order:
        size = len(lines.shown[i]) + 1
        if keep[i] or (size > HUGE_LINE and not lines.failure[i] and not CI_ERROR.match(lines.clean[i])):
            continue
        tier = min(t.tier[i], 3)
        alone = not ((i > 0 and keep[i - 1]) or (i + 1 < n and keep[i + 1]))
        cost = size + (_MARKER if alone else 0)
        if tier >= 2 and core_used is None:
            core_used = used
        if tier >= 3 and filled is None:
            filled = used
        if tier <= 1:
            cap = limits.core
        elif tier == 2:  # context: half as much again as the failures took, at least a little
            cap = min(
                limits.core, limits.context, (core_used or 0) + max((core_used or 0) // 2, _CONTEXT_MIN)
            )
        else:  # other lines (the model's first): a quarter of what the failures took, at least a little
            if ranks and lines.clean[i].strip() in seen:  # a repeat says nothing new
                continue
            extra = min(limits.fill, max((core_used or 0) // 8, _FILL_MIN))
            cap = min(limits.core, (filled or 0) + extra)
        if used + cost <= cap:
            keep[i] = True
            used += cost
            if ranks and tier >= 3:
                seen.add(lines.clean[i].strip())
    _fill_gaps(lines.shown, keep, min(limits.core, max(limits.context, used)) - used)
    return keep


def _fill_gaps(shown: list[str], keep: list[bool], room: int) -> None:
    """Short runs of dropped lines between kept ones cost little more than their marker: keep them."""
    i, n = 0, len(shown)
    while i < n:
        if keep[i]:
            i += 1
            continue
        j = i
        while j < n and not keep[j]:
            j += 1
        size = sum(len(shown[k]) + 1 for k in range(i, j))
        if i > 0 and j < n and j - i <= 2 and size <= 160 and size - _MARKER <= room:
            keep[i:j] = [True] * (j - i)
            room -= max(0, size - _MARKER)
        i = j


def render(lines: Lines, keep: list[bool], ref: str, collapse: bool) -> tuple[str, int, int, int]:
    """The kept lines verbatim (without their leading timestamps and colour codes: Lines.shown), each
    dropped run as one marker; with `collapse`, the lines right after a kept line that differ from it
    only in numbers become a count on it.
    Returns (text, dropped chars, lines collapsed into counts, lines of the log shown)."""
    out = Out(ref)
    collapsed = 0
    shown = lines.shown
    i, n = 0, len(lines.raw)
    while i < n:
        if not keep[i]:
            out.drop(shown[i])
            i += 1
            continue
        j = i + 1
        if collapse:  # the lines after it that differ only in numbers, kept or not
            key = shape(lines.clean[i])
            while j < n and shape(lines.clean[j]) == key:
                j += 1
        rest = sum(len(ln) + 1 for ln in shown[i + 1 : j])
        if j - i == 1 or rest <= len(omission(rest, ref)):
            for k in range(i, j):
                out.keep_whole(shown[k])
        else:
            out.keep_whole(shown[i])
            out.lines[-1] += f" (×{j - i}) {omission(rest, ref)}"
            out.dropped += rest
            collapsed += 1
        i = j
    text = out.render()
    return text, out.dropped, collapsed, len(out.lines) - out.markers
