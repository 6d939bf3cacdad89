"""Build logs, CI job logs and test runs: the lines that say what failed, within a budget.

One compressor for both kinds (`log`, `test`): lines are cleaned for classification (ANSI escapes and
timestamp prefixes removed, summarizer.compress.clean), classified by structure
(summarizer.compress.classify), tiered and chosen whole within a character budget
(summarizer.compress.select). What is shown are the original lines (without their leading
timestamps and colour codes); each run of dropped lines is one omission marker with the archive
reference. Only the header differs between the kinds. A `LogPlan`
is made once per text and can be rendered at many budgets (a digest looks for the size that fits).
"""

from __future__ import annotations

from collections.abc import Mapping

from summarizer.compress.classify import Lines, classify
from summarizer.compress.clean import clean_text
from summarizer.compress.select import Budget, candidates, choose, default_budget, plan, render
from summarizer.compress.testrun import test_marks


class LogPlan:
    """A log's classified lines and tiers, ready to render at any budget."""

    def __init__(self, body: str, kind: str, clean: str | None = None) -> None:
        """`clean`: clean_text(body), if the caller has it already."""
        self.kind = kind
        self.size = len(body)
        self.lines: Lines = classify(body.split("\n"), clean_text(body) if clean is None else clean)
        marks, self.summary = test_marks(self.lines.clean, self.lines.hinted, self.lines.text)
        self.tiers = plan(self.lines, marks)
        self.ranks: Mapping[int, float] = {}  # the model's score of some lines (summarizer.digest)
        self.model_lines = 0  # in the last rendering: lines shown because the model ranked them

    def candidates(self) -> list[int]:
        """Lines worth the model's ranking, the most worth scoring first (select.candidates)."""
        return candidates(self.lines, self.tiers)

    def core_chars(self) -> int:
        """What the lines that say why it failed (tiers 0-1) take, within the default budget."""
        need = sum(len(self.lines.shown[i]) + 1 for i, t in enumerate(self.tiers.tier) if t <= 1)
        return min(need, default_budget(self.size).core)

    def compress(self, ref: str, budget: Budget | None = None) -> tuple[str, str, int]:
        """(header, rendering, dropped chars) within `budget` (default: default_budget)."""
        limits = budget or default_budget(self.size)
        keep = choose(self.lines, self.tiers, limits, self.ranks)
        self.model_lines = 0
        if self.ranks:  # what the model added: the lines the rules alone would not show
            alone = choose(self.lines, self.tiers, limits)
            self.model_lines = sum(1 for i, k in enumerate(keep) if k and not alone[i])
        text, dropped, collapsed, shown = render(self.lines, keep, ref, collapse=self.kind == "log")
        if self.kind == "test":
            return f"test run: {self.summary}", text, dropped
        repeats = f", {collapsed} repeats collapsed" if collapsed else ""  # (5 tokens in every log's digest)
        return f"log: {len(self.lines.raw)} lines, {shown} shown{repeats}", text, dropped


def compress_log(body: str, ref: str) -> tuple[str, str, int]:
    return LogPlan(body, "log").compress(ref)


def compress_test(body: str, ref: str) -> tuple[str, str, int]:
    return LogPlan(body, "test").compress(ref)
