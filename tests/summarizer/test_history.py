"""A history with patches (`git show`, `git log -p --stat`, `git format-patch`) is compressed as a diff
that still says which change each patch is: the commits' ids, authors, dates and subjects, and the
stat summary. Real git in a scratch repository; before, the diff compressor dropped all of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from summarizer.compress import Renderer, compress
from summarizer.digest import Item, Summarizer
from summarizer.frame import unquoted
from tests.fixtures.gitrepo import git, rescale, scratch_repo, write_module

SUBJECTS = (
    "Fix the off-by-one in parse_window when the header is empty",
    "Retry flaky uploads in sync_bucket with a bounded backoff",
    "Rename helper_total to compute_total",
)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("history")
    lines = scratch_repo(root, 300)
    for k, subject in enumerate(SUBJECTS):
        lines = rescale(lines, 40 * k, 25, k + 3)
        write_module(root, lines)
        body = "\n".join(f"Detail {j} of why: the window was read one line late." for j in range(12))
        git(root, "commit", "-qam", f"{subject}\n\n{body}")
    return root


def test_git_log_p_keeps_each_commit_s_id_author_date_and_subject(history: Path) -> None:
    log = git(history, "log", "-p", "--stat", "-3")
    r = Renderer(log, ref="a1#s1")
    assert r.kind == "diff"
    text = r.render().text
    for sha in git(history, "log", "--format=%H", "-3").split():
        assert f"commit {sha}" in text
    for subject in SUBJECTS:
        assert f"    {subject}" in text
    assert text.count("Author: Dev One <dev@example.com>") == 3
    assert text.count("Date: ") == 3
    assert text.count("1 file changed, 25 insertions(+), 25 deletions(-)") == 3
    assert "Detail 2 of why" in text and "Detail 11 of why" not in text  # a long message's head only
    assert "+value_80 = compute_total(80, scale=5)  # line 80 of the module" in text  # changed lines kept ...
    assert (
        " value_77 = compute_total(77, scale=2)  # line 77 of the module" in log and " value_77 " not in text
    )  # context not


def test_git_show_and_format_patch_say_which_change_they_are(history: Path) -> None:
    show = compress(git(history, "show", "HEAD"), ref="a1#s1").text
    assert SUBJECTS[-1] in show and git(history, "rev-parse", "HEAD").strip() in show
    patch = compress(git(history, "format-patch", "-1", "--stdout", "HEAD~1"), ref="a1#s1").text
    assert f"Subject: [PATCH] {SUBJECTS[1]}" in patch


async def test_a_digest_of_a_history_quotes_its_commits(history: Path) -> None:
    log = git(history, "log", "-p", "-3")
    summarizer = Summarizer(None)
    items = [
        Item("s1", "tool_call", "git log -p -3", 6),
        Item("s2", "tool_result", log, summarizer.count(log)),
    ]
    digest = await summarizer.digest(items, "a1#d1", 600)
    assert unquoted(digest.text, items) == []
    assert SUBJECTS[-1] in digest.text  # the newest commit, which the log shows first
