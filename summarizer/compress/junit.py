"""JUnit XML test reports (`pytest --junitxml`, Maven Surefire, Gradle, Bazel's `test.xml`): the
suites, and each failing test case with its failure.

A report a tool printed (`cat build/test-results/test/TEST-*.xml`) is mostly passing test cases;
what an agent needs of it is how many ran and which failed, and why. `compress_junit` shows the
suites' opening tags, then for each test case holding a `<failure>` or an `<error>`: its
`<testcase ...>` tag, the failure's tag (its `message`), and the first lines of its text, the
lines a runner marks as the error (pytest's `E   ...`, Java's `Caused by:`) and the last lines.
Every shown piece is a verbatim part of the report (entities as written); each run of what is left
out is one omission marker. The report is scanned once, tag by tag (bounded work, no XML parser:
a report cut short or malformed is shown as far as it goes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from summarizer.compress.out import Out, plural

_SUITES_MAX = 10  # suites' tags shown
_CASES_MAX = 20  # failing test cases shown with their failure's text ...
_TAGS_MAX = 60  # ... and after those, this many more as their tag alone
_TEXT_HEAD, _TEXT_TAIL, _TEXT_MARKED = 4, 2, 6  # lines of a failure's text shown
_SCAN_MAX = 8_000_000  # a longer report is read up to here (bounded work)

_ATTRS = r"""(?:\s+[^\s=/<>"']{1,200}\s*=\s*(?:"[^"<]*"|'[^'<]*'))*\s*"""  # (`<` is escaped in XML values)
_SUITE = re.compile(rf"<testsuite(s?)\b{_ATTRS}/?>")
_CASE = re.compile(rf"<testcase\b{_ATTRS}(/?)>")
_OUTCOME = re.compile(rf"<(failure|error|skipped)\b{_ATTRS}(/?)>")
_CASE_END = "</testcase>"
_TEXT = re.compile(r"\S")
_MARKED = re.compile(r"E\s|Caused by:|\s*\S*(?:Error|Exception)\b")  # the error's own lines


class _Spans:
    """The report's parts to show, as (start, end) positions in order, each run between two of them
    one omission marker (none for the line breaks between two shown lines)."""

    def __init__(self, body: str, ref: str) -> None:
        self.body = body
        self.out = Out(ref)
        self.cursor = 0

    def show(self, start: int, end: int) -> None:
        start = max(start, self.cursor)
        if end <= start:
            return
        if _TEXT.search(self.body, self.cursor, start):  # (no copy of the gap: a report is re-rendered)
            self.out.omit(start - self.cursor)
        for line in self.body[start:end].split("\n"):
            if line.strip():
                self.out.keep(line)
        self.cursor = end

    def render(self) -> str:
        if _TEXT.search(self.body, self.cursor):
            self.out.omit(len(self.body) - self.cursor)
        return self.out.render()


Span = tuple[int, int]


@dataclass
class _Failed:
    """A test case that failed or errored: its tag, its outcome's tag, its text's shown lines."""

    tag: Span
    outcome: Span
    text: list[Span]


@dataclass
class _Report:
    suites: list[Span] = field(default_factory=list)  # the first _SUITES_MAX tags
    n_suites: int = 0  # <testsuite> elements (not the <testsuites> root)
    cases: int = 0
    failed: list[_Failed] = field(default_factory=list)  # the first _CASES_MAX + _TAGS_MAX
    counts: dict[str, int] = field(default_factory=lambda: {"failure": 0, "error": 0, "skipped": 0})


def _text_lines(body: str, start: int, end: int) -> list[Span]:
    """The lines of a failure's text (body[start:end]) that are shown: the first, those a runner
    marks as the error, the last."""
    spans: list[Span] = []
    pos = start
    while pos < end:
        nl = body.find("\n", pos, end)
        stop = end if nl < 0 else nl
        if body[pos:stop].strip():
            spans.append((pos, stop))
        pos = stop + 1
    middle = spans[_TEXT_HEAD : max(_TEXT_HEAD, len(spans) - _TEXT_TAIL)]
    marked = [s for s in middle if _MARKED.match(body, s[0], s[1])][:_TEXT_MARKED]
    return sorted({*spans[:_TEXT_HEAD], *marked, *spans[max(_TEXT_HEAD, len(spans) - _TEXT_TAIL) :]})


def _parse(scan: str) -> _Report:
    report = _Report()
    for suite in _SUITE.finditer(scan):
        report.n_suites += not suite[1]
        if len(report.suites) < _SUITES_MAX:
            report.suites.append(suite.span())
    pos = 0
    while m := _CASE.search(scan, pos):
        report.cases += 1
        if m[1]:  # <testcase ... />: it passed
            pos = m.end()
            continue
        close = scan.find(_CASE_END, m.end())
        end = len(scan) if close < 0 else close
        outcome = _OUTCOME.search(scan, m.end(), end)
        pos = end if close < 0 else close + len(_CASE_END)
        if outcome is None:
            continue
        report.counts[outcome[1]] += 1
        if outcome[1] == "skipped" or len(report.failed) >= _CASES_MAX + _TAGS_MAX:
            continue
        text: list[Span] = []
        if not outcome[2] and len(report.failed) < _CASES_MAX:  # its text, up to its end tag
            stop = scan.find(f"</{outcome[1]}>", outcome.end(), end)
            text = _text_lines(scan, outcome.end(), end if stop < 0 else stop)
        report.failed.append(_Failed(m.span(), outcome.span(), text))
    return report


def _render(body: str, ref: str, report: _Report, detail: int, n: int) -> tuple[str, int]:
    """(rendering, dropped chars) with the first `n` failed cases: at `detail` 2 with their
    outcome's tag and text (the first _CASES_MAX), 1 with their outcome's tag, 0 the case's tag
    alone; with the suites' tags but at detail -1."""
    shown = _Spans(body, ref)
    spans = [*report.suites] if detail >= 0 else []
    for k, case in enumerate(report.failed[:n]):
        spans.append(case.tag)
        if detail >= 1 and k < _CASES_MAX:
            spans.append(case.outcome)
        if detail >= 2:
            spans.extend(case.text)
    for a, b in sorted(spans):
        shown.show(a, b)
    return shown.render(), shown.out.dropped


def compress_junit(body: str, ref: str, room: int | None = None) -> tuple[str, str, int]:
    """A JUnit XML report as its suites and failing test cases (see the module's doc); in `room`
    characters, without the failures' text, then without their tags or the suites', then with
    fewer failures, as the room needs."""
    report = _parse(body[:_SCAN_MAX])
    c = report.counts
    header = (
        f"test report: {plural(report.n_suites, 'suite')}, {plural(report.cases, 'testcase')}: "
        f"{plural(c['failure'], 'failure')}, {plural(c['error'], 'error')}, {c['skipped']} skipped"
    )
    total = len(report.failed)
    text, dropped = _render(body, ref, report, 2, total)
    if room is not None:
        sizes = sorted({min(total, n) for n in (total, 20, 10, 5, 3, 1)}, reverse=True)
        tries = [(d, n) for n in sizes for d in (1, 0, -1)]
        for detail, n in tries:
            if len(text) + len(header) + 4 <= room:
                break
            text, dropped = _render(body, ref, report, detail, n)
    return header, text, dropped
