"""A JUnit XML report a tool printed is shown as its suites and its failing test cases, with their
failures. Before, pytest's report (one line of XML) was taken for a file read and outlined by the
`def` lines inside its failures' text: no failing test's name, no failure message. Real reports:
pytest's own `--junitxml`, of a real failing suite run in a subprocess, in both of its formats."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from summarizer.compress import compress
from summarizer.detect import detect
from summarizer.digest import Item, Summarizer
from summarizer.frame import unquoted
from tests.fixtures.junit import pytest_report

REF = "a1#s1"
MARKER = re.compile(r"\[… (\d+) chars omitted; recall a1#s1\]")
FAILING = (17, 123, 250)
SUITE = f"""
import pytest

@pytest.mark.parametrize("i", range(300))
def test_value(i):
    print("checking", i)
    assert i not in {FAILING}, f"value {{i}} is reserved"

def test_needs_a_fixture(missing_fixture):
    pass

@pytest.mark.skip(reason="not on this platform")
def test_skipped():
    pass
"""


def _report(root: Path, family: str) -> str:
    return pytest_report(root, SUITE, family, "all")


@pytest.fixture(scope="module", params=["xunit1", "xunit2"])
def report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return _report(tmp_path_factory.mktemp(request.param), request.param)


def _checked(text: str, room: int | None = None) -> str:
    out = compress(text, ref=REF, max_chars=room)
    assert out.kind == "junit" and compress(text, ref=REF, max_chars=room) == out
    assert sum(int(n) for n in MARKER.findall(out.text)) == out.dropped_chars <= len(text)
    assert room is None or len(out.text) <= room
    return out.text


def test_a_report_shows_its_failing_cases_and_why(report: str) -> None:
    assert detect(report) == "junit"
    shown = _checked(report)
    assert shown.startswith("[test report: 1 suite, 302 testcases: 3 failures, 1 error, 1 skipped]")
    for i in FAILING:
        assert f'name="test_value[{i}]"' in shown
        assert f"AssertionError: value {i} is reserved" in shown
    assert 'name="test_needs_a_fixture"' in shown and "fixture 'missing_fixture' not found" in shown
    assert 'name="test_value[0]"' not in shown and 'name="test_skipped"' not in shown
    assert len(shown) < len(report) // 5


def test_a_smaller_room_keeps_every_failing_case_s_name(report: str) -> None:
    for room in (1200, 700):
        shown = _checked(report, room)
        assert all(f'name="test_value[{i}]"' in shown for i in FAILING)
        assert 'name="test_needs_a_fixture"' in shown


async def test_a_digest_of_a_report_quotes_it(report: str) -> None:
    items = [Item("s1", "tool_result", report, len(report) // 4)]
    digest = await Summarizer(None).digest(items, "a1", 400)
    assert unquoted(digest.text, items) == []
    assert 'name="test_value[17]"' in digest.text


def test_a_report_cut_short_or_malformed_is_shown_as_far_as_it_goes(tmp_path: Path) -> None:
    full = _report(tmp_path, "xunit2")
    half = full[: full.index('name="test_value[200]"')]
    shown = _checked(half)
    assert 'name="test_value[123]"' in shown and 'name="test_value[250]"' not in shown
    # tags left open by the thousand: read in one pass (each `<testcase` looks no further than
    # its attributes), and the case that follows them is found
    garbage = '<testsuite name="x">' + '<testcase a="1' * 20_000 + "<testcase b='2' " * 20_000
    garbage += '<testcase name="last"><failure message="boom">trace</failure></testcase></testsuite>'
    shown = _checked(garbage)
    assert 'name="last"' in shown and 'message="boom"' in shown


def test_other_xml_is_no_report() -> None:
    dependency = "  <dependency><artifactId>x</artifactId></dependency>\n"
    pom = '<?xml version="1.0"?>\n<project>\n' + dependency * 50 + "</project>\n"
    assert detect(pom) != "junit"
