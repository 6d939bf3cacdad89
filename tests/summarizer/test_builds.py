"""What a digest at 1/8 keeps of real failing builds (tests/fixtures/builds.py): the failing tests'
names, their messages and locations, the verdict; of a generated family of names (`adds_017`,
`mod017.c`), the key facts and the names line carry two, not the room of everything else; none of
the runner's advice (Maven's `Re-run Maven using the -X switch`). Every line of the digest outside
its frame quotes the run's output (summarizer.frame)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from summarizer.digest import Item, Summarizer
from summarizer.frame import FACTS_LABEL, unquoted
from summarizer.layout import NAMES_LABEL
from tests.fixtures.builds import (
    cargo_test,
    cmake_configure,
    ctest_run,
    gtest_run,
    make_gcc,
    make_link,
    maven_javac,
    maven_surefire,
    node_tap,
    prove_run,
    ruff_check,
    sanitized_c,
)

ADVICE = ("Re-run Maven using the -X switch", "[Help 1] http", "re-run Maven with the -e switch")
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
    "make (link)": (  # the linker's lines hold no error word
        make_link,
        (
            "undefined reference to `ledger_close'",
            "undefined reference to `ledger_total'",
            "undefined reference to `post_batch'",
            "undefined reference to `post_entry'",
            "undefined reference to `audit_flush'",
            "undefined reference to `audit_trail'",
            "collect2: error: ld returned 1 exit status",
            "make: *** [Makefile:5: app] Error 1",
        ),
        r"chk\d+",
    ),
    "mvn --fail-at-end test": (  # the failing module's results are in the middle, its verdict first
        maven_surefire,
        (
            "[test run: Tests run: 123, Failures: 2, Errors: 1",  # not the next module's clean run
            "LedgerTest.roundsTheTotal:6 totals must round up",
            "LedgerTest.parsesTheDefaultPort:8 bad port 80800",
            "LedgerTest.readsTheConfig:10 NullPointer",
            "on project core: There are test failures",
            "BUILD FAILURE",
        ),
        r"Mod\d+Test",
    ),
    "mvn compile (javac)": (
        maven_javac,
        (
            "Mod080.java:[3,34] cannot find symbol",
            "Mod081.java:[3,41] cannot find symbol",
            "class Point",
            "undeclaredTotal",
            "missingHelper",
            "COMPILATION ERROR",
            "BUILD FAILURE",
        ),
        r"Mod\d+\.java",
    ),
    "ruff check (full format)": (  # its diagnostics hold no error word
        ruff_check,
        (
            "F401 [*] `os` imported but unused",
            "--> mod080.py:1:8",
            "F821 Undefined name `undefined_total`",
            "--> mod080.py:5:16",
            "Found 2 errors.",
        ),
        r"mod\d+\.py",
    ),
    "cmake configure": (
        cmake_configure,
        (
            "CMake Error at CMakeLists.txt:304 (find_package):",
            '"LedgerCrypto", but CMake did not find one.',
            "Configuring incomplete, errors occurred!",
        ),
        r"mod\d+",
    ),
    "ctest": (  # a counter on every line (`Test #152:`) is no issue reference: two of it, not 40
        ctest_run,
        (
            "Test #152: ledger_totals_round_up",
            "totals must round up (got 10.004)",
            "Test #153: ledger_parses_port",
            "bad port 80800",
            "2 tests failed out of 302",
            "The following tests FAILED:",
            "Errors while running CTest",
        ),
        r"#\d+",
    ),
    "prove": (  # Test::More's diagnostics and prove's verdicts
        prove_run,
        (
            "#   Failed test 'totals round up'",
            "#     expected: '10.01'",
            "Dubious, test returned 1",
            "t/ledger_totals.t (Wstat: 256",
            "Result: FAIL",
        ),
        r"mod\d+\.t",
    ),
    "AddressSanitizer": (
        sanitized_c,
        (
            "case ledger-header-too-long",
            "ERROR: AddressSanitizer: heap-buffer-overflow",
            "in pack_record pack.c:4",
            "SUMMARY: AddressSanitizer: heap-buffer-overflow",
            "exit code 1",
        ),
        r"rec\d+",
    ),
    "GoogleTest": (  # gtest's location lines, the expectation's values, the failed tests and their list
        gtest_run,
        (
            "slug_test.cc:17: Failure",
            'Which is: "creme-brulee"',
            "slug_test.cc:24: Failure",
            "no port in config line: Port = 8080",
            "[  FAILED  ] Titles/SlugTest.MakesSlugs/217, where GetParam() = 217 (0 ms)",
            "[  FAILED  ] 2 tests, listed below:",
            "2 FAILED TESTS",
        ),
        r"MakesSlugs/\d+",
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
    assert [a for a in ADVICE if a in digest.text] == [], digest.text
    lines = digest.text.split("\n")
    listed = " ".join(ln for ln in lines if ln.startswith((FACTS_LABEL, NAMES_LABEL)))
    assert len(re.findall(family, listed)) <= 2, listed
    assert unquoted(digest.text, [item]) == []
