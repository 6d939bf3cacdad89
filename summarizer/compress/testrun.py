"""Test runs: failures, summaries and tracebacks of pytest, unittest, Maven and other runners."""

from __future__ import annotations

import re
from collections import Counter

from summarizer.textscan import line_starts, lines_with

_TEST_SUMMARY = re.compile(
    r"=+ [^\n]*\b(?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|no tests ran)\b[^\n]*=+"
    r"|(?:\d+ (?:passed|failed|errors?|skipped|warnings?|xfailed|xpassed|deselected),? )+in [\d.]+s\S*"
    r"|Ran \d+ tests? in \S+|OK(?: \([^)]*\))?|FAILED \([^)]*\)|=* ?tests finished:[^\n]*"
    r"|Ran \d+ of \d+ Specs? in [\d.]+ seconds"  # Ginkgo's
    r"|(?:\[\w+\] )?Tests run: \d+, Failures: \d+, Errors: \d+, Skipped: \d+"
    r"|(?:\[\w+\] )?BUILD (?:SUCCESS|FAILURE|FAILED)\b[^\n]*|[\w.-]+: commands (?:succeeded|failed)"
    r"|congratulations :\)|(?:ok|FAIL)[ \t]+\S+[ \t]+[\d.]+s"
    # mocha's `106366 passing (10m)` / `1 failing` / `3 pending`; jest's `Tests:       1 failed, 41
    # passed, 42 total` and `Test Suites: ...`; vitest's `Test Files  1 failed | 3 passed (4)`; cargo's
    # `test result: FAILED. 3 passed; 1 failed; ...`; node --test's and TAP's `# pass 41`, `ℹ fail 1`
    r"|\d+ (?:passing|failing|pending)(?: \(\w+\))?|Test(?:s| Suites):[ \t]+(?:\d+ \w+, )*\d+ total"
    r"|(?:Test Files|Tests)[ \t]+\d+ (?:failed|passed)(?: \| \d+ \w+)*(?: \(\d+\))?"
    r"|test result: (?:ok|FAILED)\. \d+ passed; \d+ failed;[^\n]*|[#ℹ] (?:tests|pass|fail) \d+"
)
_TEST_KEEP = re.compile(
    r"=+ .+ =+$|_{3,} .+ _{3,}$|(?:FAILED|FAIL|ERROR|ERRORS|XPASS)\b|collect(?:ed|ing \.\.\. collected) \d+"
    r"|Found \d+ tests?|\[ERROR\] .*\S|make(?:\[\d+\])?: \*\*\*"
)
_WORD = re.compile(r"[\w.]+")
_TALLIED = re.compile(r"\b(?:Failures|Errors): [1-9]|\b[1-9]\d* (?:failed|errors?)\b")
_EXCEPTION_NAMES = ("Error", "Exception", "Failure", "Exit", "Interrupt")
_PROGRESS = re.compile(r"(?:\S+\s+)?[.sxXfFE]+\s*(?:\[\s*\d+%\])?")
_PYTEST_HEADER = re.compile(r"_{3,} .+ _{3,}$")
_BANNER = re.compile(r"=+ .+ =+$")
_LOCATION = re.compile(r"(?=[^\s:]*[/.])[^\s:]+:\d+: \S")
_FRAME = re.compile(r'\s*File "[^"\n]+", line \d+')


def _stack_end(lines: list[str], i: int) -> tuple[list[tuple[int, int]], int]:
    """The frames ([start, end) of each) of the stack starting at line i, and the line after it."""
    frames: list[tuple[int, int]] = []
    j, n = i, len(lines)
    while j < n and _FRAME.match(lines[j]):
        start = j
        j += 1
        while j < n and j - start <= 4 and lines[j].startswith("    ") and not _FRAME.match(lines[j]):
            j += 1
        frames.append((start, j))
    return frames, j


def _mark_tracebacks(lines: list[str], keep: list[bool]) -> None:
    """For each Python stack: its first and last frame (with code line) and the exception after it.

    A stack ending in the same exception as two earlier ones keeps only its exception line.
    """
    i, n = 0, len(lines)
    seen: Counter[str] = Counter()
    while i < n:
        if not _FRAME.match(lines[i]):
            i += 1
            continue
        frames, j = _stack_end(lines, i)
        exception = lines[j] if j < n else ""
        seen[exception] += 1
        if seen[exception] <= 2:
            for start, end in {frames[0], frames[-1]}:
                stop = min(end, start + 2)
                keep[start:stop] = [True] * (stop - start)
            if i > 0 and lines[i - 1].strip().startswith("Traceback"):
                keep[i - 1] = True
        for k in range(j, min(j + 4, n)):
            if not lines[k].strip():
                break
            keep[k] = True
        i = j


def _mark_pytest_blocks(lines: list[str], keep: list[bool], underscored: list[int]) -> None:
    """In each pytest failure block: the failing source line, the E lines and the last locations."""
    starts = [i for i in underscored if _PYTEST_HEADER.match(lines[i])]
    for b, start in enumerate(starts):
        end = starts[b + 1] if b + 1 < len(starts) else len(lines)
        e_lines: list[int] = []
        locations: list[int] = []
        for i in range(start + 1, end):
            ln = lines[i]
            if _BANNER.match(ln):
                break
            if ln.startswith(">"):
                keep[i] = True
            elif ln.startswith("E "):
                e_lines.append(i)
            elif _LOCATION.match(ln):
                locations.append(i)
        for i in e_lines[:6] + e_lines[-2:] + locations[-2:]:
            keep[i] = True


def _test_summary(lines: list[str]) -> str:
    found = [
        re.sub(r"^\[\w+\] ", "", ln.strip().strip("=").strip())
        for ln in lines
        if len(ln) < 400 and _TEST_SUMMARY.fullmatch(ln.strip())
    ]
    if not found:
        return "no summary line"
    last = found[-1]
    partner = {"OK": "Ran ", "FAILED (": "Ran ", "BUILD ": "Tests run: "}
    for prefix, wanted in partner.items():
        if last.startswith(prefix):
            earlier = [f for f in found[:-1] if wanted in f]
            if "FAIL" in last:  # a reactor's failing module, not the next module's clean run
                earlier = [f for f in earlier if _TALLIED.search(f)] or earlier
            if earlier:
                return f"{earlier[-1]}; {last}"
    return last


def _test_line_kept(line: str) -> bool:
    """Summary, banner, failure, error and exception lines of a test run, and progress lines with F/E."""
    head = line[:400]
    if _TEST_KEEP.match(head) or "error: " in head or "fatal: " in head or "<<< " in head:
        return True
    word = _WORD.match(head)
    if word and word[0].endswith(_EXCEPTION_NAMES) and word[0].rsplit(".", 1)[-1][:1].isupper():
        return True
    s = head.strip()
    if len(line) >= 400 or len(s) < 2:
        return False
    return bool(_TEST_SUMMARY.fullmatch(s) or (("F" in s or "E" in s) and _PROGRESS.fullmatch(s)))


_GATE_WORDS = (  # a line without any of these (and no error hint) cannot be a test runner's line
    "passed", "Ran ", "OK", "Tests run", "BUILD", "XPASS", "collect", "Found ", "Interrupt", "commands",
    "congratulations", "tests finished", "..", "%]", "ok", "passing", "pending", "Tests:", "Tests  ",
    "Test Suites", "Test Files", "test result:", "# pass", "ℹ pass",
)  # fmt: skip


_GATED_MAX = 15_000


def _gated(lines: list[str], hinted: list[bool], text: str) -> list[int]:
    """Lines that may be a test runner's: holding an error hint or a gate word, or a banner."""
    found = lines_with(text, _GATE_WORDS, line_starts(lines))
    return [i for i, ln in enumerate(lines) if hinted[i] or i in found or ln[:1] in ("=", "_")]


def test_marks(lines: list[str], hinted: list[bool], text: str) -> tuple[list[tuple[int, int]], str]:
    """(line, tier) marks of a test runner's structure in clean `lines` (`hinted`: lines holding an
    error word; `text`: the clean lines joined): the final summary in tier 0; banners, failures,
    progress lines with F/E, traceback ends and pytest failure blocks in tier 1. And the run's summary."""
    gated = _gated(lines, hinted, text)
    if len(gated) > 2 * _GATED_MAX:  # bounded work: a runner's structure is at the ends
        gated = gated[:_GATED_MAX] + gated[-_GATED_MAX:]
    keep = [False] * len(lines)
    for i in gated:
        keep[i] = _test_line_kept(lines[i])
    if 'File "' in text:
        _mark_tracebacks(lines, keep)
    if "\n___" in text or text.startswith("___"):
        _mark_pytest_blocks(lines, keep, [i for i in gated if lines[i][:1] == "_"])
    marks = [(i, 1) for i, k in enumerate(keep) if k]
    summaries = [i for i in gated if len(lines[i]) < 400 and _TEST_SUMMARY.fullmatch(lines[i].strip())]
    marks += [(i, 0) for i in summaries[-2:]]
    return marks, _test_summary([lines[i] for i in summaries])
