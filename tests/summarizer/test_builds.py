"""What a digest at 1/8 keeps of real failing builds (tests/fixtures/builds.py): the failing tests'
names, their messages and locations, the verdict; of a generated family of names (`adds_017`,
`mod017.c`), the key facts and the names line carry two, not the room of everything else. Every
line of the digest outside its frame quotes the run's output (summarizer.frame)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from summarizer.digest import Item, Summarizer
from summarizer.frame import FACTS_LABEL, unquoted
from summarizer.layout import NAMES_LABEL
from tests.fixtures.builds import cargo_test, make_gcc, node_tap

CASES: dict[str, tuple[Callable[[Path], str], tuple[str, ...], str]] = {
    # run, what the digest must show, a family of generated names
    "node --test": (
        node_tap,
        (
            "not ok 142 - slugifies unicode titles",
            "not ok 143 - reads the config",
            "Expected values to be strictly equal",
            "slug.test.js:145",
            "# fail 2",
        ),
        r"slugifies title \d+",
    ),
    "cargo test": (
        cargo_test,
        (
            "tests::parses_the_default_port",
            "tests::rounds_the_total",
            "bad port 80800",
            "totals must round up",
            "panicked at src/lib.rs:",
            "test result: FAILED",
        ),
        r"adds_\d+",
    ),
    "make": (
        make_gcc,
        (
            "mod120.c:1:",
            "storage size of 'p' isn't known",
            "'undeclared_total' undeclared",
            "missing_helper",  # named after the error only in a warning: the names line carries it
            "make: *** [Makefile",
        ),
        r"mod\d+\.c",
    ),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", CASES)
async def test_a_failing_build_keeps_its_failures_and_two_of_a_family(tmp_path: Path, name: str) -> None:
    run, signals, family = CASES[name]
    text = run(tmp_path)
    assert "exit code 0" not in text, text[-2000:]  # the run failed, as the project was made to
    summ = Summarizer(None)
    item = Item("s1", "tool_result", text, summ.count(text))
    digest = await summ.digest([item], "a1", item.tokens // 8)
    assert digest.tokens <= item.tokens // 8
    missing = [s for s in signals if s not in digest.text]
    assert missing == [], digest.text
    lines = digest.text.split("\n")
    listed = " ".join(ln for ln in lines if ln.startswith((FACTS_LABEL, NAMES_LABEL)))
    assert len(re.findall(family, listed)) <= 2, listed
    assert unquoted(digest.text, [item]) == []
