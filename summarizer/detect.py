"""Content-type detection for tool output (deterministic, bounded work).

`detect` looks through the envelope the agent harness wraps around a tool output (mini-swe-agent's
``<returncode>``/``<output>`` tags, OpenHands' ``cat -n`` preamble, SWE-agent's footer) and classifies
the body from a bounded sample (its first 64k and last 16k characters), so it costs milliseconds
even on a 900k-character observation.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

ContentKind = Literal[
    "test", "log", "json", "grep", "diff", "file", "listing", "page", "table", "markdown", "junit", "prose"
]

_HEAD_SAMPLE = 64_000
_TAIL_SAMPLE = 16_000
_MAX_SAMPLE_LINES = 500
_MAX_JSON_CHARS = 20_000_000


@dataclass(frozen=True)
class Envelope:
    """A tool output split into harness boilerplate and the body the tool actually printed.

    ``prefix`` and ``suffix`` are kept verbatim around a compressed body; ``dropped`` counts
    boilerplate characters that are neither (mini-swe-agent's "output too long" warning);
    ``note`` is a short remark for the header (e.g. that the harness already elided text);
    ``hint`` is a kind the envelope itself proves (an OpenHands ``cat -n`` read is a file).
    """

    prefix: str
    body: str
    suffix: str
    dropped: int = 0
    note: str = ""
    hint: ContentKind | None = None


_MINI_OUTPUT = re.compile(r"(<returncode>-?\d+</returncode>\n<output>\n)(.*)(</output>\s*)", re.S)
_MINI_WARNING = re.compile(
    r"(<returncode>-?\d+</returncode>\n)(<warning>.*?</warning>\s*)<output_head>\n(.*)</output_head>\s*"
    r"<elided_chars>\s*(\d+) characters elided\s*</elided_chars>\s*<output_tail>\n(.*)(</output_tail>\s*)",
    re.S,
)
_MINI_TIMEOUT = re.compile(
    r"(The last command <command>.*?</command> timed out and has been killed\.\n"
    r"The output of the command was:\n ?<output>\n)(.*)(</output>.*)",
    re.S,
)
_OPENHANDS_READ = re.compile(
    r"(Here's the result of running `cat -n` on [^\n]*:\n)(.*?)(<response clipped>.*)?", re.S
)
_SWE_FOOTER = re.compile(r"\n\(Open file: [^\n]*\)\n\(Current directory: [^\n]*\)\nbash-\$\s*")
_SWE_FILE = re.compile(r"(\[File: [^\n]*\(\d+ lines total\)\]\n)(.*)", re.S)


def split_envelope(text: str) -> Envelope:
    """Split a tool output into (prefix, body, suffix); unknown formats are all body."""
    if text.startswith("<returncode>"):
        if m := _MINI_OUTPUT.fullmatch(text):
            return Envelope(m[1], m[2], m[3])
        if m := _MINI_WARNING.fullmatch(text):
            body = m[3] + ("" if m[3].endswith("\n") else "\n") + m[5]
            dropped = len(text) - len(m[1]) - len(m[3]) - len(m[5])
            return Envelope(m[1], body, "", dropped, f"harness already elided {m[4]} chars")
    if text.startswith("The last command <command>") and (m := _MINI_TIMEOUT.fullmatch(text)):
        return Envelope(m[1], m[2], m[3], note="command timed out")
    if text.startswith("Here's the result of running `cat -n`") and (m := _OPENHANDS_READ.fullmatch(text)):
        return Envelope(m[1], m[2], m[3] or "", hint="file")
    if text.rstrip().endswith("bash-$"):
        cut = text.rfind("\n(Open file: ")
        if cut >= 0 and _SWE_FOOTER.fullmatch(text, cut):
            inner = split_envelope(text[:cut])
            suffix = inner.suffix + text[cut:]
            return Envelope(inner.prefix, inner.body, suffix, inner.dropped, inner.note, inner.hint)
    if text.startswith("[File: ") and (m := _SWE_FILE.fullmatch(text)):
        return Envelope(m[1], m[2], "", hint="file")
    return Envelope("", text, "")


def sample_lines(body: str) -> list[str]:
    """Non-empty lines from the start and end of `body`, bounded in count and size."""
    if len(body) > _HEAD_SAMPLE + _TAIL_SAMPLE:
        head = body[:_HEAD_SAMPLE].rsplit("\n", 1)[0]
        tail = body[-_TAIL_SAMPLE:].split("\n", 1)[-1]
        body = head + "\n" + tail
    lines = [ln for ln in body.split("\n") if ln.strip()]
    if len(lines) > _MAX_SAMPLE_LINES:
        lines = lines[: _MAX_SAMPLE_LINES - 100] + lines[-100:]
    return lines


_DIFF_HEADER = re.compile(r"^(?:diff --git |--- \S[^\n]*\n\+\+\+ \S)", re.M)
_HUNK_HEADER = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)
TEST_SIGNAL = re.compile(
    r"^(?:=+ (?:test session starts|FAILURES|ERRORS|short test summary info|test process starts) =+$"
    r"|=+ [^\n]*\b\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b[^\n]*=+$"
    r"|(?:\d+ (?:passed|failed|errors?|skipped|warnings?|xfailed|xpassed|deselected),? )+in [\d.]+s"
    r"|Ran \d+ tests? in [\d.]+s$"
    r"|=* ?tests finished: \d+ passed"
    r"|(?:\[\w+\] )?Tests run: \d+, Failures: \d+, Errors: \d+"
    r"|(?:--- )?(?:FAIL|PASS|ok)[ \t]+\S+[ \t]+\(?[\d.]+s\)?$"
    r"|[\w.-]+: commands (?:succeeded|failed)$"
    r"|make(?:\[\d+\])?: \*\*\* )",
    re.M,
)
# GitHub Actions' workflow commands, which only its runner's log holds
_CI_MARK = re.compile(r"^##\[(?:group|endgroup|error|warning)\]", re.M)
_NUMBERED = re.compile(r" *\d+[\t→]")  # `cat -n`; Claude Code's Read puts an arrow after the number
_COLON_NUMBERED = re.compile(r"(\d{1,9}):")
_GREP_LINE = re.compile(
    r"(?:(?=[^\s:]*[/.])[^\s:]+:(?:\d+[:-]|\s*\S)|grep: .*: binary file matches$|Binary file .* matches$)"
)
_LS_LONG = re.compile(r"(?:[-dlcbps][rwxsStT-]{9}[.@+]?\s+\d+\s|total \d+$)")
_NAME_LINE = re.compile(r"/?[\w.@+~,-]+(?:/[\w.@+~,-]*)*[/*@]?|\.?[\w./@+~-]*:")
_CODE_LINE = re.compile(
    r"\s*(?:#|//|/\*|\*|@\w|(?:def|class|import|from|return|if|elif|else|for|while|try|except|finally|with|raise|"
    r"assert|pass|yield|break|continue|async|await|public|private|protected|static|func|function|const|let|var|"
    r"package|fn|fun|be|new|case|switch|do|use|impl|struct|enum|typedef|void|int|char)\b)"
    r"|.*(?:[=(){}\[\];,:]\s*$|\w\(|\s=\s)"
)
_DEFINITION = re.compile(
    r"\s*(?:(?:async +)?def |class |import |from \S+ import |#include|func |function |fn |fun |package |"
    r"(?:public|private|protected|static) )"
)
_PROGRAM_OUTPUT = re.compile(r"^Traceback \(most recent call last\):$|^\S+:\d+: \w*Warning: ", re.M)
_LOG_LINE = re.compile(
    r"(?:\[?(?:INFO|DEBUG|WARN|WARNING|ERROR|TRACE|FATAL|CRITICAL)\b|.*\b\d{2}:\d{2}:\d{2}\b|\d{4}-\d{2}-\d{2}"
    r"|Traceback \(most recent call last\))"
)


def _fraction(lines: list[str], pattern: re.Pattern[str]) -> float:
    if not lines:
        return 0.0
    return sum(1 for ln in lines if pattern.match(ln)) / len(lines)


def _sample_text(body: str) -> str:
    if len(body) <= _HEAD_SAMPLE + _TAIL_SAMPLE:
        return body
    return body[:_HEAD_SAMPLE] + "\n" + body[-_TAIL_SAMPLE:]


def _is_json(body: str, lines: list[str]) -> bool:
    stripped = body.strip()
    if len(stripped) > _MAX_JSON_CHARS or not stripped or stripped[0] not in "[{":
        return False
    if stripped[-1] in "]}":
        try:
            json.loads(stripped)
        except (ValueError, RecursionError):
            pass
        else:
            return True
    return len(lines) >= 3 and all(_json_object_line(ln) for ln in lines[:50])


def _json_object_line(line: str) -> bool:
    s = line.strip()
    if not (s.startswith("{") and s.endswith("}")):
        return False
    try:
        json.loads(s)
    except (ValueError, RecursionError):
        return False
    return True


def _consecutive(lines: list[str]) -> bool:
    nums = [int(m[1]) for ln in lines if (m := _COLON_NUMBERED.match(ln))]
    if len(nums) < 2:
        return False
    steps = sum(1 for a, b in itertools.pairwise(nums) if b == a + 1)
    return steps >= 0.8 * (len(nums) - 1)


def _numbered_kind(lines: list[str]) -> ContentKind | None:
    if _fraction(lines, _NUMBERED) >= 0.6:
        return "file"
    if _fraction(lines, _COLON_NUMBERED) >= 0.6:
        return "file" if _consecutive(lines) else "grep"
    return None


def _is_listing(lines: list[str]) -> bool:
    if len(lines) < 3:
        return False
    names = sum(1 for ln in lines if _NAME_LINE.fullmatch(ln))
    longs = sum(1 for ln in lines if _LS_LONG.match(ln))
    return longs + names >= 0.85 * len(lines)


def _is_source(lines: list[str]) -> bool:
    if _fraction(lines, _GREP_LINE) >= 0.3:  # lint or compiler messages quoting code
        return False
    code = _fraction(lines, _CODE_LINE)
    definitions = sum(1 for ln in lines if _DEFINITION.match(ln))
    return code >= 0.7 or (code >= 0.5 and definitions >= 1) or (code >= 0.25 and definitions >= 3)


_DOCTYPE = re.compile(
    r"\A\ufeff?\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html)\b", re.I | re.S
)
_TAG = re.compile(r"</?[a-zA-Z][\w-]*(?:\s[^<>]*)?/?>")
_PAGE_MARK = re.compile(r"<(?:body|head|/html)\b", re.I)
_TEMPLATE = re.compile(r"\{%|\{\{")


# a JUnit XML report: its root (or only) element is <testsuites> or <testsuite>
_JUNIT = re.compile(r"\A\ufeff?\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<testsuites?[\s>]", re.S)


def _is_page(sample: str, lines: list[str]) -> bool:
    """Whether a tool output is an HTML page: it opens as one (a doctype or `<html>`), or (after an
    HTTP response's headers, say) most of its lines carry tags and it has a `<body>` or `<head>`.
    A template's source (`{% ... %}`, `{{ ... }}`) is a file to read, not a page."""
    if len(_TEMPLATE.findall(sample)) >= 3:
        return False
    if _DOCTYPE.match(sample):
        return True
    if not lines or not _PAGE_MARK.search(sample):
        return False
    tagged = sum(1 for ln in lines if _TAG.search(ln))
    return tagged >= 0.5 * len(lines)


_MD_HEADING = re.compile(r"#{1,6}[ \t]+\S")
_MD_SUBHEADING = re.compile(r"#{2,6}[ \t]+\S")
_FENCE = re.compile(r" {0,3}(?:```|~~~)")


def _is_markdown(lines: list[str]) -> bool:
    """Whether sampled lines are a Markdown document: 3 or more ATX headings outside fenced code
    blocks, one of them a `##` or deeper (a script's `# comment` lines are no outline), in a text
    that is not source code (a Python file's `## section` comments: its code lines are most)."""
    headings = sub = 0
    fenced = False
    for ln in lines:
        if _FENCE.match(ln):
            fenced = not fenced
        elif not fenced and _MD_HEADING.match(ln):
            headings += 1
            sub += bool(_MD_SUBHEADING.match(ln))
    return headings >= 3 and sub >= 1 and not _is_source(lines)


def is_page(body: str) -> bool:
    """Whether a tool output's body is an HTML page (cheap when it plainly is not one)."""
    head = body[:_HEAD_SAMPLE].lower()
    if "<html" not in head and "<body" not in head and "<head" not in head and "<!doctype" not in head:
        return False
    return _is_page(_sample_text(body), sample_lines(body))


_DELIMITERS = (",", "\t", "|", ";", "│")  # (the last: `sqlite3 -box`, box-drawing borders)
# a table's rule line (`+----+----+`, `|---|:--:|`, `----+----`, `├────┼────┤`): no field in it
_RULE = re.compile(r"[\s|+:=\-─━═│┃║┼╋╪├┤┬┴┌┐└┘╔╗╚╝╠╣╦╩╬╞╡╭╮╯╰]+")
_RULE_MARK = re.compile(r"[-=─━═]")
_BORDERS = "|│┃║"


def table_lines(lines: Sequence[str]) -> list[tuple[str, str]]:
    """(line, the text its fields are read from) of each line of `lines` that is not a rule: a
    line between two borders (`| a | b |` of a Markdown table or `mysql`, `│ a │ b │` of
    `sqlite3 -box`) without them; any other line as it is."""
    out = []
    for ln in lines:
        s = ln.strip(" \r")
        if _RULE.fullmatch(s) and _RULE_MARK.search(s):
            continue
        bordered = len(s) >= 2 and s[0] in _BORDERS and s[-1] == s[0]
        out.append((ln, s[1:-1] if bordered else ln))
    return out


_COLUMN_NAME = re.compile(r"(?=.{1,40}$)[A-Za-z_][\w.()/%#-]*(?: [\w.()/%#-]+){0,3}")  # a few words at most


def split_rows(lines: Sequence[str], delimiter: str) -> list[list[str]]:
    """`lines` split into fields (csv's quoting rules); a line csv refuses (a field over its size
    limit) is one field."""
    try:
        return list(csv.reader(lines, delimiter=delimiter))
    except csv.Error:
        rows = []
        for line in lines:
            try:
                rows.append(next(csv.reader([line], delimiter=delimiter), []))
            except csv.Error:
                rows.append([line])
        return rows


def table_delimiter(lines: Sequence[str]) -> str | None:
    """The delimiter that splits `lines` (5 or more, rules aside: see table_lines) as a table, or
    None: the first line is a header (2 or more fields, each a name of a few words, not a number
    or a timestamp: a log line's `10:00:00,123` is none), two rows more have as many fields, and
    90 % of the lines have 2 to that many (a row may leave its last fields out)."""
    fields = [text for _, text in table_lines(lines[:200])]
    if len(fields) < 5:
        return None
    for d in _DELIMITERS:
        rows = split_rows(fields, d)
        width = len(rows[0]) if rows and rows[0] else 0
        if width < 2 or not all(_COLUMN_NAME.fullmatch(f.strip()) for f in rows[0]):
            continue
        whole = sum(1 for r in rows if len(r) == width)  # (a row may leave its last fields out)
        if whole >= 3 and sum(1 for r in rows if 2 <= len(r) <= width) >= 0.9 * len(rows):
            return d
    return None


# a column's name in an aligned table's header: a word or two (`CONTAINER ID`, `%CPU`, `Use%`)
_ALIGNED_NAME = re.compile(r"(?=.{1,40}$)[A-Za-z_%#][\w.()/%#:-]*(?: [\w.()/%#:-]+)?")
_ALIGNED_WIDTH_MAX = 1000  # the columns are found in the lines' first 1 000 characters


def aligned_columns(lines: Sequence[str]) -> list[tuple[int, int]] | None:
    """The columns, (start, end) positions, of a table aligned with spaces (`docker ps`, `kubectl
    get`, `pip list`, `ps aux`, `df`), or None: in the first 200 lines (rules aside, no tabs) the
    positions that are blank in every line split them into 3 or more columns (2 under a rule
    line); a column whose header is blank belongs to the one before it (a command's words); every
    column is named by the header line (a word or two, not a number or a timestamp); and 90 % of
    the rows fill the first column. The last column runs to the end of each line."""
    sample = lines[:200]
    kept = table_lines(sample)
    rows = [ln.rstrip() for ln, _ in kept if ln.strip()]
    if len(rows) < 6 or any("\t" in r for r in rows):
        return None
    width = min(_ALIGNED_WIDTH_MAX, max(len(r) for r in rows))
    filled = bytearray(width)
    for r in rows:
        for p, ch in enumerate(r[:width]):
            if ch != " ":
                filled[p] = 1
    spans: list[tuple[int, int]] = []
    p = 0
    while p < width:
        if not filled[p]:
            p += 1
            continue
        q = p
        while q < width and filled[q]:
            q += 1
        if spans and not rows[0][p:q].strip():  # no name of its own: the column before's
            spans[-1] = (spans[-1][0], q)
        else:
            spans.append((p, q))
        p = q
    ruled = len(kept) < len(sample)
    if len(spans) < (2 if ruled else 3):
        return None
    if not all(_ALIGNED_NAME.fullmatch(rows[0][a:b].strip()) for a, b in spans):
        return None
    first = spans[0]
    if sum(1 for r in rows[1:] if r[first[0] : first[1]].strip()) < 0.9 * (len(rows) - 1):
        return None
    return spans


def detect_body(body: str) -> ContentKind:
    """Classify an already-unwrapped tool output body."""
    lines = sample_lines(body)
    if not lines:
        return "prose"
    sample = _sample_text(body)
    if _JUNIT.match(sample):  # (before diffs: a failure's text may hold one)
        return "junit"
    if _DIFF_HEADER.search(sample) and _HUNK_HEADER.search(sample):
        return "diff"
    if _is_json(body, lines):
        return "json"
    if _is_page(sample, lines):
        return "page"
    if TEST_SIGNAL.search(sample):
        return "test"
    if table_delimiter(lines) is not None or aligned_columns(lines) is not None:
        return "table"  # (before `cat -n`: a TSV's first column may be numbers)
    if numbered := _numbered_kind(lines):
        return numbered
    if len(_CI_MARK.findall(sample, 0, 200_000)) >= 2:  # a CI runner's log, whatever its steps print
        return "log"
    if _fraction(lines, _GREP_LINE) >= 0.6:
        return "grep"
    if _is_listing(lines):
        return "listing"
    if _is_markdown(lines):
        return "markdown"
    if _fraction(lines, _LOG_LINE) >= 0.2 or _PROGRAM_OUTPUT.search(sample):
        return "log"
    if _is_source(lines):
        return "file"
    if len(lines) >= 40:
        return "log"
    return "prose"


def detect(text: str) -> ContentKind:
    """The kind of content in a tool output (or any text); unknown or conversational text is prose."""
    env = split_envelope(text)
    return env.hint or detect_body(env.body)
