"""Build logs, CI job logs and test runs: the lines that say what failed, within a budget.

One compressor for both kinds (`log`, `test`): lines are cleaned for classification (ANSI escapes and
timestamp prefixes removed, summarizer.compress.clean), classified by structure
(summarizer.compress.classify), tiered and chosen whole within a character budget
(summarizer.compress.select). What is shown are the original lines; each run of dropped lines is one
omission marker with the archive reference. Only the header differs between the kinds.
"""

from __future__ import annotations

from summarizer.compress.classify import classify
from summarizer.compress.clean import clean_text
from summarizer.compress.select import Budget, choose, default_budget, plan, render
from summarizer.compress.testrun import test_marks


def _select(
    body: str, ref: str, budget: Budget | None, collapse: bool
) -> tuple[list[str], str, int, int, str]:
    raw = body.split("\n")
    lines = classify(raw, clean_text(body))
    marks, summary = test_marks(lines.clean, lines.hinted, lines.text)
    tiers = plan(lines, marks)
    keep = choose(lines, tiers, budget or default_budget(len(body)))
    text, dropped, collapsed = render(lines, keep, ref, collapse)
    return lines.clean, text, dropped, collapsed, summary


def compress_log(body: str, ref: str, budget: Budget | None = None) -> tuple[str, str, int]:
    clean, text, dropped, collapsed, _ = _select(body, ref, budget, collapse=True)
    shown = text.count("\n") + 1 - collapsed
    header = f"log: {len(clean)} lines, {shown} shown, {collapsed} repeats collapsed"
    return header, text, dropped


def compress_test(body: str, ref: str, budget: Budget | None = None) -> tuple[str, str, int]:
    _, text, dropped, _, summary = _select(body, ref, budget, collapse=False)
    return f"test run: {summary}", text, dropped
