"""Coloured tool output is read for what it says: real programs run twice, once with colours forced
on (`--color=always`, pytest's `--color=yes`) and once plain, must compress, name and digest alike.

Before, a coloured `git diff` was compressed to `[diff: 1 files, +0 -0, 0 hunks]` (every changed line
started with an escape, not a `+`), and a digest of a coloured pytest run named `mF mFAILED mE` and
quoted `31mtest_x.py` as a key fact."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from summarizer.compress import compress
from summarizer.digest import Item, Summarizer
from summarizer.frame import unquoted
from summarizer.names import ranked_names
from tests.fixtures.gitrepo import rescale, scratch_repo, write_module
from watcher.planning.identifiers import identifiers, terms

REF = "a1#s1"
FAILING = """
def helper_value():
    return 3


def test_alpha_case():
    assert helper_value() == 4


def test_beta_case():
    assert helper_value() == 3
"""


def _run(cmd: list[str], cwd: Path) -> str:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, check=False).stdout
    assert out, cmd
    return out


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository with a committed file of 400 lines, 30 of them changed since."""
    root = tmp_path_factory.mktemp("repo")
    write_module(root, rescale(scratch_repo(root), 100, 30, 3))
    (root / "test_x.py").write_text(FAILING)
    return root


@pytest.mark.parametrize(
    "cmd",
    [
        ["git", "diff", "--color=never"],
        ["grep", "--color=never", "-n", "compute_total(1", "module.py"],
        ["ls", "--color=never", "-la", "/usr/bin"],
    ],
    ids=["git-diff", "grep", "ls"],
)
def test_a_coloured_output_compresses_as_the_plain_one(repo: Path, cmd: list[str]) -> None:
    plain = _run(cmd, repo)
    coloured = _run([c.replace("=never", "=always") for c in cmd], repo)
    assert "\x1b[" in coloured and "\x1b" not in plain
    got = compress(coloured, ref=REF)
    assert "\x1b" not in got.text
    assert got.text == compress(plain, ref=REF).text
    assert got.dropped_chars >= len(coloured) - len(plain)  # the colours are not in the rendering
    if cmd[0] == "git":
        assert "+30 -30" in got.text and "scale=3" in got.text


def test_a_coloured_test_run_gives_the_plain_run_s_names_and_identifiers(repo: Path) -> None:
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_x.py"]
    plain = _run([*pytest_cmd, "--color=no"], repo)
    coloured = _run([*pytest_cmd, "--color=yes"], repo)
    assert "\x1b[" in coloured
    names = ranked_names([Item("s1", "tool_result", coloured, 400)])
    assert set(names) == set(ranked_names([Item("s1", "tool_result", plain, 400)]))
    assert {"test_alpha_case", "helper_value", "AssertionError"} <= set(names)
    assert identifiers(coloured) == identifiers(plain)
    timing = {t for t in terms(coloured) if t[:-1].isdigit()}  # "0.64s": each run takes its time
    assert set(terms(coloured)) - timing <= set(terms(plain))


async def test_a_digest_of_coloured_outputs_quotes_them_without_their_colours(repo: Path) -> None:
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_x.py"]
    diffs = _run(["git", "diff", "--color=always"], repo), _run(["git", "diff"], repo)
    runs = _run([*pytest_cmd, "--color=yes"], repo), _run([*pytest_cmd, "--color=no"], repo)
    summarizer = Summarizer(None)

    def region(diff: str, run: str) -> list[Item]:
        return [
            Item("s1", "tool_call", "git diff", 4),
            Item("s2", "tool_result", diff, summarizer.count(diff)),
            Item("s3", "tool_call", "pytest test_x.py", 6),
            Item("s4", "tool_result", run * 3, summarizer.count(run * 3)),
        ]

    coloured, plain = region(diffs[0], runs[0]), region(diffs[1], runs[1])
    digest = await summarizer.digest(coloured, "a1#d1", 400)
    assert "\x1b" not in digest.text
    assert unquoted(digest.text, coloured) == []
    shown = next(ln for ln in digest.text.split("\n") if ln.startswith("Names")).split(": ", 1)[1].split()
    assert shown
    assert set(shown) <= set(ranked_names(plain))  # no `mF`, `mFAILED`, `31mtest_x.py`
    facts = next((ln for ln in digest.text.split("\n") if ln.startswith("Key facts")), "")
    assert "31m" not in facts and "[0m" not in facts
