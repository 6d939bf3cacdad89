"""What a log line says, without the bytes that defeat classification.

CI runners prefix every line with a timestamp (GitHub Actions: `2024-01-01T00:00:00.0000000Z `; other
tools: ISO dates, syslog dates, `[12:34:56]`), programs colour their output with ANSI escapes and
progress bars rewrite a line with carriage returns. `clean_lines` removes all of that, line for line
(the i-th clean line belongs to the i-th input line), so the compressors classify what the line says;
what they show is always the original line.
"""

from __future__ import annotations

import re
from typing import Final

# ANSI CSI sequences and OSC strings (BEL or ST terminated; never across a line)
ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_ISO = r"\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d| ?UTC)?\]?"
_SYSLOG = r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d"
_CLOCK = r"\[\d\d:\d\d:\d\d(?:[.,]\d+)?\]"
# one or two stamps at the start of a line (a runner's, then the program's own), with a BOM before
PREFIX: Final = re.compile(rf"^\ufeff?(?:(?:{_ISO}|{_SYSLOG}|{_CLOCK})[ \t]?){{1,2}}", re.M)


def uncoloured(text: str) -> str:
    """`text` without its ANSI escapes (colours, cursor moves, terminal titles): what a program that
    coloured its output said. Read so wherever a section's words count (the compressors of other
    kinds than logs, names, key facts, the planner's identifiers): `ESC[1mESC[31mtest_x.py` names
    `test_x.py`, not `31mtest_x.py`, and a coloured diff's changed lines start with `+`. Every line
    of it is still a verbatim piece of the text without its escapes (summarizer.frame accepts those)."""
    return ANSI.sub("", text) if "\x1b" in text else text


def clean_text(body: str) -> str:
    """`body` with ANSI escapes and line-start timestamps removed and carriage returns turned into
    spaces; it has exactly as many lines as `body`."""
    text = uncoloured(body)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", " ")
    return PREFIX.sub("", text)


def stamp_free(line: str) -> str:
    """`line` without the timestamps at its start (a runner's, then the program's own), as a log's
    rendering shows it (colour codes go too: classify.Lines.shown). Half of a CI log's tokens are such
    stamps; the recall reference gives them back, and the rest is still a verbatim piece of the line."""
    m = PREFIX.match(line)
    return line[m.end() :] if m and m.end() else line


def shape(line: str) -> str:
    """A line with its numbers (and hex ids) blanked: lines that differ only there share a shape."""
    return _NUMBERS.sub("#", line)


_NUMBERS: Final = re.compile(r"\b[0-9a-f]{7,}\b|\d+")
_NAMES: Final = re.compile(r"[^\s'\"()\[\]{}<>,;=]*[/\\][^\s'\"()\[\]{}<>,;=]*|'[^'\n]*'|\"[^\"\n]*\"")


def kind_of(line: str) -> str:
    """A looser shape: paths and quoted strings blanked too, so the same failure of another test or
    file ("a/x.ts failed to pass", "b/y.ts failed to pass") counts as a repeat."""
    return _NUMBERS.sub("#", _NAMES.sub("P", line))
