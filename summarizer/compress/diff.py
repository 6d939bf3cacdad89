"""Diffs: file headers, hunk headers and changed lines; context lines dropped.

A history with patches (`git show`, `git log -p`, `git format-patch`) also keeps what says which
change a patch is: each commit's header (`commit <sha>`, `Author:`, `Date:`, `Merge:`) and the
first lines of its message, and the `--stat` summary (`3 files changed, ...`). The rest of a long
message, and the per-file `--stat` lines (the file headers name the files), are dropped."""

from __future__ import annotations

import re
from dataclasses import dataclass

from summarizer.compress.out import Out

_HUNK = re.compile(r"@@ -\d+(?:,(\d{1,9}))? \+\d+(?:,(\d{1,9}))? @@")
_DIFF_META = (
    "diff --git ", "index ", "--- ", "+++ ", "new file mode", "deleted file mode", "similarity index",
    "rename from", "rename to", "old mode", "new mode", "Binary files", "copy from", "copy to",
)  # fmt: skip
_DIFF_MAX_FILES = 50
_COMMIT = re.compile(r"(?:commit|From) [0-9a-f]{7,64}\b")  # `git log`/`git show`; a format-patch mail
_COMMIT_META = ("Author: ", "Date: ", "Merge: ", "AuthorDate: ", "Commit: ", "CommitDate: ", "Subject: ")
_STAT = re.compile(r" \d+ files? changed(?:, \d+ insertions?\(\+\))?(?:, \d+ deletions?\(-\))?$")
_MESSAGE_LINES = 6  # of a commit's message: its subject and what its first lines say


@dataclass
class _DiffState:
    n_files: int  # files in the whole diff
    files: int = 0
    modified: int = 0  # files seen so far that are changed, not added or deleted in full
    hunks: int = 0
    adds: int = 0
    dels: int = 0
    old_left: int = 0
    new_left: int = 0
    changed_in_file: int = 0
    whole_file: bool = False  # the current file is added or deleted in full
    message: int = -1  # lines of the current commit's message kept so far; -1: not in a commit header

    def cap(self) -> int:
        """How many changed lines of the current file to show."""
        if self.whole_file:
            return 0 if self.n_files > 10 else 10
        return 80 if self.modified <= _DIFF_MAX_FILES else 0


def _diff_hunk_line(line: str, st: _DiffState, out: Out) -> None:
    tag = line[:1]
    if tag in ("", " ", "\\"):
        if tag != "\\":
            st.old_left, st.new_left = st.old_left - 1, st.new_left - 1
        out.drop(line)
        return
    if tag == "-":
        st.old_left, st.dels = st.old_left - 1, st.dels + 1
    else:
        st.new_left, st.adds = st.new_left - 1, st.adds + 1
    st.changed_in_file += 1
    if st.changed_in_file <= st.cap():
        out.keep(line)
    else:
        out.drop(line)


def _commit_line(line: str, st: _DiffState) -> bool:
    """Whether `line` (outside a hunk) is one a history keeps: a commit's header, the first lines of
    its message (indented by git, or a mail's subject), or a `--stat` summary."""
    if _COMMIT.match(line):
        st.message = 0
        return True
    if st.message < 0:
        return _STAT.match(line) is not None
    if line.startswith(_COMMIT_META):
        return True
    if line.startswith("    ") and line.strip():
        st.message += 1
        return st.message <= _MESSAGE_LINES
    return _STAT.match(line) is not None


def _diff_meta_line(line: str, st: _DiffState, out: Out) -> None:
    if line.startswith("diff --git "):
        st.message = -1  # the commit's patch starts
    elif _commit_line(line, st):
        out.keep(line)
        return
    if line.startswith("diff --git ") or (line.startswith("--- ") and st.hunks and not st.files):
        st.files += 1
        st.modified += 1
        st.changed_in_file = 0
        st.whole_file = False
    if line.startswith(("new file mode", "deleted file mode")) and not st.whole_file:
        st.whole_file = True
        st.modified -= 1
    if (h := _HUNK.match(line)) is not None:
        st.hunks += 1
        st.old_left = int(h[1]) if h[1] is not None else 1
        st.new_left = int(h[2]) if h[2] is not None else 1
    always = line.startswith(("diff --git ", "new file mode", "deleted file mode", "rename ", "Binary files"))
    wanted = always or (st.cap() > 0 and not line.startswith("index "))
    if (h is not None or line.startswith(_DIFF_META)) and wanted:
        out.keep(line)
    else:
        out.drop(line)


def compress_diff(body: str, ref: str) -> tuple[str, str, int]:
    lines = body.split("\n")
    n_files = body.count("\ndiff --git ") + body.startswith("diff --git ")
    st = _DiffState(n_files)
    out = Out(ref)
    for line in lines:
        if (st.old_left > 0 or st.new_left > 0) and line[:1] in ("", " ", "-", "+", "\\"):
            _diff_hunk_line(line, st, out)
        else:
            st.old_left = st.new_left = 0
            _diff_meta_line(line, st, out)
    files = max(st.files, 1)
    header = f"diff: {files} files, +{st.adds} -{st.dels}, {st.hunks} hunks; context lines dropped"
    return header, out.render(), out.dropped
