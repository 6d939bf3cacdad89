"""Deterministic compressors for tool output, one per content kind.

Each compressor keeps what an agent needs from an old tool output (failures and summaries of a test
run, errors of a log, the changed lines of a diff, the outline of a file...) and replaces everything
else with an omission marker naming the archive reference, so the original can be recalled. All of
them are pure functions of their input: the same text always gives the same bytes, and every loop is
bounded so a 900k-character observation is handled in milliseconds.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from summarizer.detect import ContentKind, Envelope, detect_body, split_envelope

SMALL_INPUT = 1200  # texts this short are returned unchanged: a digest line would not be much shorter
_LINE_MAX = 400  # kept lines longer than this are clipped ...
_LINE_KEEP = 300  # ... to this many characters plus a marker
_PENDING_KEEP = 96  # pending dropped text shorter than this is held so it can be kept verbatim
_MAX_LINES = 40_000  # longer bodies lose their middle lines before compression (bounds the work)


@dataclass(frozen=True)
class Compressed:
    text: str  # the compressed rendering
    kind: ContentKind
    dropped_chars: int  # how many chars of the input are not in the output


def omission(n_chars: int, ref: str) -> str:
    """The marker that stands for `n_chars` characters the archive keeps under `ref`."""
    return f"[… {n_chars} chars omitted; recall {ref}]"


# --------------------------------------------------------------------------------------------- output


class _Out:
    """Builds a rendering: kept lines verbatim, each run of dropped lines as one omission marker."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self.lines: list[str] = []
        self.dropped = 0
        self._pending: list[str] = []
        self._pending_chars = 0

    def keep(self, line: str) -> None:
        self._flush()
        self.lines.append(self._clip(line))

    def note(self, line: str) -> None:
        """A synthetic line (a summary we wrote, not input text)."""
        self._flush()
        self.lines.append(line if len(line) <= _LINE_MAX else line[: _LINE_MAX - 1] + "…")

    def drop(self, line: str) -> None:
        self._pending_chars += len(line) + 1
        if self._pending_chars <= _PENDING_KEEP:
            self._pending.append(line)

    def omit(self, n_chars: int) -> None:
        """Say that `n_chars` characters were left out here (for restructuring compressors)."""
        self._flush()
        if n_chars > 0:
            self.lines.append(omission(n_chars, self.ref))
            self.dropped += n_chars

    def render(self) -> str:
        self._flush()
        return "\n".join(self.lines)

    def _flush(self) -> None:
        n = self._pending_chars
        if not n:
            return
        if n <= min(len(omission(n, self.ref)), _PENDING_KEEP):
            self.lines.extend(self._pending)  # the marker would be longer than what it replaces
        else:
            self.lines.append(omission(n, self.ref))
            self.dropped += n
        self._pending.clear()
        self._pending_chars = 0

    def _clip(self, line: str) -> str:
        if len(line) <= _LINE_MAX:
            return line
        cut = len(line) - _LINE_KEEP
        self.dropped += cut
        return f"{line[:_LINE_KEEP]} {omission(cut, self.ref)}"


def _render_mask(lines: list[str], keep: list[bool], out: _Out) -> None:
    for line, kept in zip(lines, keep, strict=True):
        if kept:
            out.keep(line)
        else:
            out.drop(line)


def _cap_mask(keep: list[bool], limit: int) -> None:
    """Keep at most `limit` lines: the first 80% and the last 20% of those marked."""
    marked = [i for i, k in enumerate(keep) if k]
    if len(marked) <= limit:
        return
    head = limit * 4 // 5
    for i in marked[head : len(marked) - (limit - head)]:
        keep[i] = False


# ------------------------------------------------------------------------------------------ test runs

_TEST_SUMMARY = re.compile(
    r"=+ [^\n]*\b(?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|no tests ran)\b[^\n]*=+"
    r"|(?:\d+ (?:passed|failed|errors?|skipped|warnings?|xfailed|xpassed|deselected),? )+in [\d.]+s\S*"
    r"|Ran \d+ tests? in \S+|OK(?: \([^)]*\))?|FAILED \([^)]*\)|=* ?tests finished:[^\n]*"
    r"|(?:\[\w+\] )?Tests run: \d+, Failures: \d+, Errors: \d+, Skipped: \d+"
    r"|(?:\[\w+\] )?BUILD (?:SUCCESS|FAILURE|FAILED)\b[^\n]*|[\w.-]+: commands (?:succeeded|failed)"
    r"|congratulations :\)|(?:ok|FAIL)[ \t]+\S+[ \t]+[\d.]+s"
)
_TEST_KEEP = re.compile(
    r"=+ .+ =+$|_{3,} .+ _{3,}$|(?:FAILED|FAIL|ERROR|ERRORS|XPASS)\b|collect(?:ed|ing \.\.\. collected) \d+"
    r"|Found \d+ tests?|\[ERROR\] .*\S|make(?:\[\d+\])?: \*\*\*"
)
_WORD = re.compile(r"[\w.]+")
_EXCEPTION_NAMES = ("Error", "Exception", "Failure", "Exit", "Interrupt")
_PROGRESS = re.compile(r"(?:\S+\s+)?[.sxXfFE]+\s*(?:\[\s*\d+%\])?")
_PYTEST_HEADER = re.compile(r"_{3,} .+ _{3,}$")
_BANNER = re.compile(r"=+ .+ =+$")
_LOCATION = re.compile(r"(?=[^\s:]*[/.])[^\s:]+:\d+: \S")
_FRAME = re.compile(r'\s*File "[^"\n]+", line \d+')


def _stack_end(lines: list[str], i: int) -> tuple[list[tuple[int, int]], int]:
    """The frames ([start, end) of each) of the stack starting at line i, and the line after it."""
    frames: list[tuple[int, int]] = []
    j, n = i, len(lines)
    while j < n and _FRAME.match(lines[j]):
        start = j
        j += 1
        while j < n and j - start <= 4 and lines[j].startswith("    ") and not _FRAME.match(lines[j]):
            j += 1
        frames.append((start, j))
    return frames, j


def _mark_tracebacks(lines: list[str], keep: list[bool]) -> None:
    """For each Python stack: its first and last frame (with code line) and the exception after it.

    A stack ending in the same exception as two earlier ones keeps only its exception line.
    """
    i, n = 0, len(lines)
    seen: Counter[str] = Counter()
    while i < n:
        if not _FRAME.match(lines[i]):
            i += 1
            continue
        frames, j = _stack_end(lines, i)
        exception = lines[j] if j < n else ""
        seen[exception] += 1
        if seen[exception] <= 2:
            for start, end in {frames[0], frames[-1]}:
                stop = min(end, start + 2)
                keep[start:stop] = [True] * (stop - start)
            if i > 0 and lines[i - 1].strip().startswith("Traceback"):
                keep[i - 1] = True
        for k in range(j, min(j + 4, n)):
            if not lines[k].strip():
                break
            keep[k] = True
        i = j


def _mark_pytest_blocks(lines: list[str], keep: list[bool]) -> None:
    """In each pytest failure block: the failing source line, the E lines and the last locations."""
    starts = [i for i, ln in enumerate(lines) if _PYTEST_HEADER.match(ln)]
    for b, start in enumerate(starts):
        end = starts[b + 1] if b + 1 < len(starts) else len(lines)
        e_lines: list[int] = []
        locations: list[int] = []
        for i in range(start + 1, end):
            ln = lines[i]
            if _BANNER.match(ln):
                break
            if ln.startswith(">"):
                keep[i] = True
            elif ln.startswith("E "):
                e_lines.append(i)
            elif _LOCATION.match(ln):
                locations.append(i)
        for i in e_lines[:6] + e_lines[-2:] + locations[-2:]:
            keep[i] = True


def _test_summary(lines: list[str]) -> str:
    found = [
        re.sub(r"^\[\w+\] ", "", ln.strip().strip("=").strip())
        for ln in lines
        if len(ln) < 400 and _TEST_SUMMARY.fullmatch(ln.strip())
    ]
    if not found:
        return "no summary line"
    last = found[-1]
    partner = {"OK": "Ran ", "FAILED (": "Ran ", "BUILD ": "Tests run: "}
    for prefix, wanted in partner.items():
        if last.startswith(prefix):
            earlier = [f for f in found[:-1] if wanted in f]
            if earlier:
                return f"{earlier[-1]}; {last}"
    return last


def _test_line_kept(line: str) -> bool:
    """Summary, banner, failure, error and exception lines of a test run, and progress lines with F/E."""
    head = line[:400]
    if _TEST_KEEP.match(head) or "error: " in head or "fatal: " in head or "<<< " in head:
        return True
    word = _WORD.match(head)
    if word and word[0].endswith(_EXCEPTION_NAMES) and word[0].rsplit(".", 1)[-1][:1].isupper():
        return True
    s = head.strip()
    if len(line) >= 400 or len(s) < 2:
        return False
    return bool(_TEST_SUMMARY.fullmatch(s) or (("F" in s or "E" in s) and _PROGRESS.fullmatch(s)))


def _compress_test(body: str, ref: str) -> tuple[str, str, int]:
    lines = body.split("\n")
    keep = [False] * len(lines)
    for i, ln in enumerate(lines):
        keep[i] = _test_line_kept(ln)
    _mark_tracebacks(lines, keep)
    _mark_pytest_blocks(lines, keep)
    nonempty = [i for i, ln in enumerate(lines) if ln.strip()]
    for i in nonempty[-3:]:
        keep[i] = True
    _cap_mask(keep, 250)
    out = _Out(ref)
    _render_mask(lines, keep, out)
    return f"test run: {_test_summary(lines)}", out.render(), out.dropped


# ----------------------------------------------------------------------------------------------- logs

_DIGITS = re.compile(r"\d+")
_LOG_IMPORTANT = re.compile(
    r"(?i:\b(?:error|exception|traceback|fatal|critical|fail|failed|failure|warn|warning|panic|denied|"
    r"refused|aborted|timed out|timeout|segmentation fault|killed)\b)|\w(?:Error|Exception|Warning)\b"
)
_LOG_HEAD_RUNS = 5
_LOG_TAIL_RUNS = 12
_LOG_HINTS = (  # looked for in the lower-cased text: a cheap pre-filter for _LOG_IMPORTANT
    "error", "exception", "traceback", "fatal", "critical", "fail", "warn", "panic", "denied", "refused",
    "abort", "timed out", "timeout", "segmentation fault", "killed",
)  # fmt: skip
_LOG_IMPORTANT_MAX = 60
_LOG_NOVEL_MAX = 15


def _runs(shapes: list[str]) -> list[tuple[int, int]]:
    """Maximal [start, end) ranges of consecutive lines with the same shape."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(shapes) + 1):
        if i == len(shapes) or shapes[i] != shapes[start]:
            runs.append((start, i))
            start = i
    return runs


def _important_lines(body: str, lines: list[str]) -> set[int]:
    """Indices of error/warning lines: lines holding a hint word, confirmed by _LOG_IMPORTANT."""
    starts = list(itertools.accumulate((len(ln) + 1 for ln in lines[:-1]), initial=0))
    low = body.lower()
    candidates: set[int] = set()
    for word in _LOG_HINTS:
        pos = low.find(word)
        while pos >= 0:
            candidates.add(bisect.bisect_right(starts, pos) - 1)
            pos = low.find("\n", pos)  # one hit per line is enough
            pos = low.find(word, pos) if pos >= 0 else -1
    return {i for i in candidates if _LOG_IMPORTANT.search(lines[i], 0, 500)}


def _select_runs(
    lines: list[str], shapes: list[str], runs: list[tuple[int, int]], important_lines: set[int]
) -> tuple[list[bool], int]:
    n = len(runs)
    keep = [False] * n
    for r in [*range(min(_LOG_HEAD_RUNS, n)), *range(max(0, n - _LOG_TAIL_RUNS), n)]:
        keep[r] = True
    per_shape: Counter[str] = Counter()
    important = 0
    novel = 0
    seen: set[str] = set()
    for r, (start, _end) in enumerate(runs):
        shape = shapes[start]
        if start in important_lines and important < _LOG_IMPORTANT_MAX:
            per_shape[shape] += 1
            if per_shape[shape] <= 2:
                important += 1
                for c in range(max(0, r - 2), min(n, r + 3)):
                    keep[c] = True
        elif shape not in seen and novel < _LOG_NOVEL_MAX:
            novel += 1
            keep[r] = True
        seen.add(shape)
    return keep, important


def _compress_log(body: str, ref: str) -> tuple[str, str, int]:
    lines = body.split("\n")
    shapes = _DIGITS.sub("#", body).split("\n")
    runs = _runs(shapes)
    keep, important = _select_runs(lines, shapes, runs, _important_lines(body, lines))
    out = _Out(ref)
    collapsed = 0
    for (start, end), kept in zip(runs, keep, strict=True):
        if not kept:
            for line in lines[start:end]:
                out.drop(line)
            continue
        rest = sum(len(ln) + 1 for ln in lines[start + 1 : end])
        if end - start == 1 or rest <= len(omission(rest, ref)):
            for line in lines[start:end]:
                out.keep(line)
            continue
        out.keep(lines[start])
        out.lines[-1] += f" (×{end - start}) {omission(rest, ref)}"
        out.dropped += rest
        collapsed += 1
    header = f"log: {len(lines)} lines, {important} error/warning lines kept, {collapsed} repeats collapsed"
    return header, out.render(), out.dropped


# ----------------------------------------------------------------------------------------------- json


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


def _compact(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[:limit] + "…"


def _describe(value: Any) -> str:
    if isinstance(value, list):
        kinds = sorted({_type_name(v) for v in value[:1000]})
        inner = "|".join(kinds) if kinds else "empty"
        if kinds == ["object"]:
            inner = "object{" + ", ".join(list(dict.fromkeys(k for v in value[:50] for k in v))[:8]) + "}"
        return f"array[{len(value)}] of {inner}"
    if isinstance(value, dict):
        keys = list(value)
        more = f", … +{len(keys) - 8}" if len(keys) > 8 else ""
        return "object{" + ", ".join(keys[:8]) + more + "}"
    return f"{_type_name(value)} {_compact(value, 80)}"


def _schema(items: list[dict[str, Any]]) -> str:
    types: dict[str, set[str]] = {}
    for item in items[:5000]:
        for key, value in item.items():
            types.setdefault(key, set()).add(_type_name(value))
    fields = [f"{k}: {'|'.join(sorted(v))}" for k, v in list(types.items())[:40]]
    more = f", … +{len(types) - 40} keys" if len(types) > 40 else ""
    return "schema: {" + ", ".join(fields) + more + "}"


def _outliers(items: list[dict[str, Any]], out: _Out) -> None:
    keysets = [frozenset(item) for item in items]
    counts = Counter(keysets)  # insertion-ordered: on a tie the key set seen first wins
    common = max(counts, key=counts.__getitem__)
    odd = [i for i, ks in enumerate(keysets) if ks != common]
    if not odd:
        return
    out.note(f"outliers: {len(odd)} items with other keys than the common {len(common)}-key set")
    for i in odd[:5]:
        extra = sorted(keysets[i] - common)[:5]
        missing = sorted(common - keysets[i])[:5]
        diff = " ".join([*(f"+{k}" for k in extra), *(f"-{k}" for k in missing)])
        out.note(f"  [{i}] {diff}: {_compact(items[i], 200)}")


def _json_array(data: list[Any], out: _Out) -> str:
    out.note(f"count: {len(data)}")
    objects = [v for v in data if isinstance(v, dict)]
    if objects and len(objects) == len(data):
        out.note(_schema(objects))
    else:
        kinds = Counter(_type_name(v) for v in data)
        out.note("item types: " + ", ".join(f"{k}×{n}" for k, n in sorted(kinds.items())))
    if data:
        out.note(f"first: {_compact(data[0])}")
    if len(data) > 1:
        out.note(f"last: {_compact(data[-1])}")
    if objects and len(objects) == len(data):
        _outliers(objects, out)
    return f"json: array of {len(data)} items"


def _json_object(data: dict[str, Any], out: _Out) -> str:
    for key in list(data)[:40]:
        out.note(f"{key}: {_describe(data[key])}")
    if len(data) > 40:
        out.note(f"… +{len(data) - 40} more keys")
    return f"json: object with {len(data)} keys"


def _parse_json(body: str) -> tuple[Any, bool]:
    """The parsed document, and whether it was JSON lines (one value per line)."""
    try:
        return json.loads(body), False
    except (ValueError, RecursionError):
        return [json.loads(ln) for ln in body.splitlines() if ln.strip()], True


def _compress_json(body: str, ref: str) -> tuple[str, str, int]:
    try:
        data, lines_format = _parse_json(body)
    except (ValueError, RecursionError):
        return _compress_log(body, ref)  # not JSON after all
    out = _Out(ref)
    if isinstance(data, dict):
        header = _json_object(data, out)
    elif isinstance(data, list):
        header = _json_array(data, out) + (" (JSON lines)" if lines_format else "")
    else:
        out.note(f"value: {_compact(data)}")
        header = f"json: {_type_name(data)}"
    shown = sum(len(ln) for ln in out.lines)
    out.omit(max(0, len(body) - shown))
    return header, out.render(), out.dropped


# ----------------------------------------------------------------------------------------------- grep

_GREP_HIT = re.compile(
    r"((?=[^\s:]*[/.])[^\s:]+?)[:-](\d+)[:-](.*)"  # path:12:text (grep -n), path-12-text (context)
    r"|((?=[^\s:]*[/.])[^\s:]+):(.*)"  # path:text (grep -r)
    r"|(\d+)[:-](.*)"  # 12:text (grep -n on one file)
)
_BINARY = re.compile(r"grep: (.+): binary file matches|Binary file (.+) matches")


def _group_hits(lines: list[str]) -> tuple[dict[str, list[str]], list[str], int]:
    """Hits per file (first-seen order), binary-match paths, count of unparsed lines."""
    groups: dict[str, list[str]] = {}
    binary: list[str] = []
    unparsed = 0
    for line in lines:
        if not line.strip() or line == "--":
            continue
        if b := _BINARY.fullmatch(line):
            binary.append(b[1] or b[2])
        elif m := _GREP_HIT.fullmatch(line):
            if m[1]:
                groups.setdefault(m[1], []).append(f"{m[2]}: {m[3].strip()}")
            elif m[4]:
                groups.setdefault(m[4], []).append(m[5].strip())
            else:
                groups.setdefault("", []).append(f"{m[6]}: {m[7].strip()}")
        else:
            unparsed += 1
    return groups, binary, unparsed


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("ch") else "s")


def _compress_grep(body: str, ref: str) -> tuple[str, str, int]:
    groups, binary, unparsed = _group_hits(body.split("\n"))
    out = _Out(ref)
    shown_files = 30
    per_file = 20 if len(groups) == 1 else max(2, min(8, 60 // max(1, min(len(groups), shown_files))))
    for path, hits in list(groups.items())[:shown_files]:
        out.note(f"{path or '(no file name)'} ({_plural(len(hits), 'match')})")
        for hit in hits[:per_file]:
            out.keep(f"  {hit}")
    rest = list(groups.items())[shown_files:]
    if rest:
        names = ", ".join(f"{p} ({len(h)})" for p, h in rest[:10])
        more = f", … +{len(rest) - 10}" if len(rest) > 10 else ""
        out.note(f"{_plural(len(rest), 'more file')} ({sum(len(h) for _, h in rest)} matches): {names}{more}")
    if binary:
        names = ", ".join(binary[:5]) + (f", … +{len(binary) - 5}" if len(binary) > 5 else "")
        out.note(f"binary file matches ({len(binary)}): {names}")
    if unparsed:
        out.note(f"{_plural(unparsed, 'other line')}")
    shown = sum(len(ln) + 1 for ln in out.lines)
    out.omit(max(0, len(body) - shown))
    n_hits = sum(len(h) for h in groups.values())
    header = f"grep: {_plural(n_hits, 'match')} in {_plural(len(groups), 'file')}"
    return header + (f", {len(binary)} binary" if binary else ""), out.render(), out.dropped


# ---------------------------------------------------------------------------------------------- diffs

_HUNK = re.compile(r"@@ -\d+(?:,(\d{1,9}))? \+\d+(?:,(\d{1,9}))? @@")
_DIFF_META = (
    "diff --git ", "index ", "--- ", "+++ ", "new file mode", "deleted file mode", "similarity index",
    "rename from", "rename to", "old mode", "new mode", "Binary files", "copy from", "copy to",
)  # fmt: skip
_DIFF_MAX_FILES = 50


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

    def cap(self) -> int:
        """How many changed lines of the current file to show."""
        if self.whole_file:
            return 0 if self.n_files > 10 else 10
        return 80 if self.modified <= _DIFF_MAX_FILES else 0


def _diff_hunk_line(line: str, st: _DiffState, out: _Out) -> None:
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


def _diff_meta_line(line: str, st: _DiffState, out: _Out) -> None:
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


def _compress_diff(body: str, ref: str) -> tuple[str, str, int]:
    lines = body.split("\n")
    n_files = body.count("\ndiff --git ") + body.startswith("diff --git ")
    st = _DiffState(n_files)
    out = _Out(ref)
    for line in lines:
        if (st.old_left > 0 or st.new_left > 0) and line[:1] in ("", " ", "-", "+", "\\"):
            _diff_hunk_line(line, st, out)
        else:
            st.old_left = st.new_left = 0
            _diff_meta_line(line, st, out)
    files = max(st.files, 1)
    header = f"diff: {files} files, +{st.adds} -{st.dels}, {st.hunks} hunks; context lines dropped"
    return header, out.render(), out.dropped


# --------------------------------------------------------------------------------------- file outline

_CAT_N = re.compile(r" *(\d{1,9})\t(.*)")
_COLON_N = re.compile(r"(\d{1,9}):(.*)")
_PY_DEF = re.compile(r"\s*(?:async\s+)?(?:def|class)\s+\w+")
_DECL = re.compile(
    r"\s*(?:(?:export|public|private|protected|internal|static|final|abstract|sealed|default|async|inline|"
    r"extern|virtual|override|pub|unsafe|const)\s+)*(?:class|interface|struct|enum|trait|impl|type|module|"
    r"namespace|actor|primitive|record|object|func|function|fn|fun|be|new|def)\s+[\w<(]"
)
_BRACE_FN = re.compile(
    r"[ \t]*((?:[A-Za-z_][\w:<>,\[\]]*[ \t*&]+)+)([A-Za-z_]\w*)[ \t]*\([^;{}]*\)?[ \t]*"
    r"(?:const\b|throws\s+[\w., ]+)?[ \t]*\{?[ \t]*"
)
_NOT_TYPES = frozenset(
    ("if", "for", "while", "switch", "catch", "return", "sizeof", "elif", "else", "new", "delete", "throw",
     "case", "goto", "await", "yield", "assert", "print", "do", "in", "is", "not", "and", "or", "typeof",
     "echo", "raise")
)  # fmt: skip
_IMPORT = re.compile(
    r"\s*(?:import\s+(?:static\s+)?([\w.*]+)|from\s+([\w.]+)\s+import|#include\s*[<\"]([^>\"]+)|using\s+([\w.]+)"
    r"|use\s+\"?([\w/.:]+)|package\s+([\w.]+)|(?:const|let|var)\s+\w+\s*=\s*require\(['\"]([^'\"]+))"
)


def _numbered(lines: list[str]) -> tuple[list[tuple[int, str]], bool]:
    """(line number, code) pairs; False when the text carried no line numbers."""
    probe = [ln for ln in lines[:40] if ln.strip()]
    for pattern in (_CAT_N, _COLON_N):
        if probe and sum(1 for ln in probe if pattern.fullmatch(ln)) >= 0.6 * len(probe):
            pairs = []
            for ln in lines:
                m = pattern.fullmatch(ln)
                if m:
                    pairs.append((int(m[1]), m[2]))
            return pairs, True
    return [(i + 1, ln) for i, ln in enumerate(lines)], False


def _is_definition(code: str, python: bool) -> bool:
    if len(code) > 300:
        return False
    if _PY_DEF.match(code) or _DECL.match(code):
        return True
    if python or "(" not in code:
        return False
    m = _BRACE_FN.fullmatch(code)
    return m is not None and m[2] not in _NOT_TYPES and m[1].split()[0] not in _NOT_TYPES


def _imports_note(pairs: list[tuple[int, str]]) -> str | None:
    names: list[str] = []
    numbers: list[int] = []
    for num, code in pairs:
        if len(code) < 300 and (m := _IMPORT.match(code)):
            numbers.append(num)
            names.append(next(g for g in m.groups() if g))
    if not names:
        return None
    unique = list(dict.fromkeys(names))
    more = f", … +{len(unique) - 12}" if len(unique) > 12 else ""
    span = f"lines {numbers[0]}-{numbers[-1]}"
    return f"imports ({len(names)}, {span}): " + ", ".join(unique[:12]) + more


def _compress_file(body: str, ref: str) -> tuple[str, str, int]:
    lines = body.split("\n")
    pairs, numbered = _numbered(lines)
    python = sum(1 for _, c in pairs if _PY_DEF.match(c)) > 0 and sum(
        1 for _, c in pairs if c.rstrip().endswith((";", "{"))
    ) < 0.1 * len(pairs)
    out = _Out(ref)
    if note := _imports_note(pairs):
        out.note(note)
    defs = [(num, code) for num, code in pairs if _is_definition(code, python)]
    if len(defs) < 2:  # a slice inside one function: show its ends instead of an empty outline
        defs = pairs[:10] + pairs[-5:] if len(pairs) > 15 else pairs
    for num, code in defs[:120] + defs[-30:] if len(defs) > 150 else defs:
        out.keep(f"{num:>6}\t{code.rstrip()}")
    out.omit(max(0, len(body) - sum(len(ln) + 1 for ln in out.lines)))
    first, last = (pairs[0][0], pairs[-1][0]) if pairs else (0, 0)
    where = f"lines {first}-{last}" + ("" if numbered else " of output (numbered here)")
    return f"file read: {where}, {len(defs)} outline entries", out.render(), out.dropped


# ------------------------------------------------------------------------------------------- listings

_LS_ENTRY = re.compile(r"([-dlcbps])[rwxsStT-]{9}[.@+]?\s+\d+\s")
_SECTION = re.compile(r"(\S.*):")


@dataclass
class _Dir:
    dirs: list[str]
    files: list[str]
    other: list[str]


def _add_entry(line: str, current: _Dir, sections: dict[str, _Dir]) -> None:
    if _LS_ENTRY.match(line):
        fields = line.split(None, 8)
        if len(fields) == 9 and (name := fields[8].split(" -> ")[0]) not in (".", ".."):
            (current.dirs if line[0] == "d" else current.files).append(name)
    elif "/" in line.rstrip("/"):
        parent, _, name = line.rstrip("/").rpartition("/")
        entry = sections.setdefault(parent, _Dir([], [], []))
        (entry.dirs if line.endswith("/") else entry.other).append(name)
    elif line.endswith("/"):
        current.dirs.append(line[:-1])
    else:
        current.other.append(line.rstrip("*@|="))


def _parse_listing(lines: list[str]) -> dict[str, _Dir]:
    sections: dict[str, _Dir] = {"": _Dir([], [], [])}
    current = sections[""]
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("total ") or line in (".", "./"):
            continue
        if (m := _SECTION.fullmatch(line)) and not _LS_ENTRY.match(line):
            current = sections.setdefault(m[1].rstrip("/"), _Dir([], [], []))
            continue
        _add_entry(line, current, sections)
    _mark_parent_dirs(sections)
    return {name: d for name, d in sections.items() if d.dirs or d.files or d.other}


def _mark_parent_dirs(sections: dict[str, _Dir]) -> None:
    """An entry of unknown type that is itself a listed directory (ls -R, find) is a directory."""
    for name, d in sections.items():
        if not name:
            continue
        moved = [n for n in d.other if f"{name}/{n}" in sections]
        d.dirs.extend(moved)
        d.other = [n for n in d.other if f"{name}/{n}" not in sections]


def _names(label: str, names: list[str], limit: int, suffix: str = "") -> str:
    shown = " ".join(n + suffix for n in names[:limit])
    more = f" … +{len(names) - limit}" if len(names) > limit else ""
    return f"  {label} ({len(names)}): {shown}{more}"


def _compress_listing(body: str, ref: str) -> tuple[str, str, int]:
    sections = _parse_listing(body.split("\n"))
    out = _Out(ref)
    limit = 40 if len(sections) <= 10 else 12
    for s_index, (name, d) in enumerate(sections.items()):
        if s_index >= 40:
            out.note(f"… {len(sections) - 40} more directories: " + " ".join(list(sections)[40:60]))
            break
        if name or len(sections) > 1:
            out.note(f"{name or '.'}:")
        for label, names, suffix in (("dirs", d.dirs, "/"), ("files", d.files, ""), ("entries", d.other, "")):
            if names:
                out.note(_names(label, names, limit, suffix))
    out.omit(max(0, len(body) - sum(len(ln) + 1 for ln in out.lines)))
    n_dirs = sum(len(d.dirs) for d in sections.values())
    n_all = n_dirs + sum(len(d.files) + len(d.other) for d in sections.values())
    header = f"listing: {n_all} entries ({n_dirs} dirs) in {_plural(len(sections), 'directory')}"
    return header.replace("directorys", "directories"), out.render(), out.dropped


# ------------------------------------------------------------------------------------------ dispatch

_Compressor = Callable[[str, str], tuple[str, str, int]]
_COMPRESSORS: dict[ContentKind, _Compressor] = {
    "test": _compress_test,
    "log": _compress_log,
    "json": _compress_json,
    "grep": _compress_grep,
    "diff": _compress_diff,
    "file": _compress_file,
    "listing": _compress_listing,
}


def _snap_head(head: str) -> str:
    cut = head.rfind("\n")
    return head[:cut] if cut >= len(head) // 2 else head


def _snap_tail(tail: str) -> str:
    cut = tail.find("\n")
    return tail[cut + 1 :] if 0 <= cut < len(tail) // 2 else tail


def _head_tail(text: str, max_chars: int, ref: str) -> tuple[str, int]:
    if len(text) <= max_chars:
        return text, 0
    budget = max_chars - len(omission(len(text), ref)) - 2  # two newlines around the marker
    if budget <= 0:
        return omission(len(text), ref), len(text)
    head_n = budget // 2
    head = _snap_head(text[:head_n])
    tail = _snap_tail(text[len(text) - (budget - head_n) :]) if budget > head_n else ""
    n = len(text) - len(head) - len(tail)
    return f"{head}\n{omission(n, ref)}\n{tail}", n


def head_tail(text: str, max_chars: int, ref: str) -> str:
    """`text` if it fits in `max_chars`, else its head and tail around an omission marker.

    Cuts fall on line boundaries when that keeps at least half of each part. The result is at most
    `max_chars` long, unless `max_chars` is smaller than the marker itself, in which case the result
    is just the marker.
    """
    return _head_tail(text, max_chars, ref)[0]


def _bound_lines(body: str, ref: str) -> tuple[str, int]:
    """Bound the per-line work: a body of more than _MAX_LINES lines loses its middle lines."""
    if body.count("\n") < _MAX_LINES:
        return body, 0
    lines = body.split("\n")
    half = _MAX_LINES // 2
    cut = sum(len(ln) + 1 for ln in lines[half:-half])
    return "\n".join([*lines[:half], omission(cut, ref), *lines[-half:]]), cut


def _wrap(env: Envelope, header: str, body: str) -> str:
    note = f"; {env.note}" if env.note else ""
    joint = "\n" if env.suffix and not env.suffix.startswith("\n") else ""
    return f"[{header}{note}]\n{env.prefix}{body}{joint}{env.suffix}"


def compress(
    text: str, *, ref: str, max_chars: int | None = None, kind: ContentKind | None = None
) -> Compressed:
    """Compress a tool output with the compressor for its kind (detected unless given).

    Prose and texts of at most SMALL_INPUT characters are kept as they are (unless `max_chars` forces a
    cut); a compression that would not shrink the text is discarded. If `max_chars` is given and the
    result is still longer, it is cut to `max_chars` with `head_tail`.
    """
    env = split_envelope(text)
    chosen: ContentKind = kind or env.hint or detect_body(env.body)
    out, dropped = text, 0
    if chosen != "prose" and len(text) > SMALL_INPUT:
        body, cut = _bound_lines(env.body, ref)
        header, body, n = _COMPRESSORS[chosen](body, ref)
        candidate = _wrap(env, header, body)
        if len(candidate) < len(text):
            out, dropped = candidate, n + cut + env.dropped
    if max_chars is not None:
        out, n = _head_tail(out, max_chars, ref)
        dropped += n
    return Compressed(out, chosen, min(dropped, len(text)))
