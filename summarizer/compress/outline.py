"""File reads (an outline of definitions and imports) and directory listings."""

from __future__ import annotations

import re
from dataclasses import dataclass

from summarizer.compress.out import Out, plural

# `cat -n` (a tab after the number); an arrow instead of the tab: the Read tool of Claude Code
_CAT_N = re.compile(r" *(\d{1,9})([\t→])(.*)")
_COLON_N = re.compile(r"(\d{1,9})(:)(.*)")
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


def _numbered(lines: list[str]) -> tuple[list[tuple[int, str]], bool, str]:
    """(line number, code) pairs; False when the text carried no line numbers; the separator the
    rendering puts after a number: the read's own arrow, else a tab (`cat -n`)."""
    probe = [ln for ln in lines[:40] if ln.strip()]
    for pattern in (_CAT_N, _COLON_N):
        if probe and sum(1 for ln in probe if pattern.fullmatch(ln)) >= 0.6 * len(probe):
            pairs = []
            arrows = 0
            for ln in lines:
                m = pattern.fullmatch(ln)
                if m:
                    pairs.append((int(m[1]), m[3]))
                    arrows += m[2] == "→"
            return pairs, True, "→" if arrows > len(pairs) // 2 else "\t"
    return [(i + 1, ln) for i, ln in enumerate(lines)], False, "\t"


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


_HEAD, _TAIL = 10, 5  # a file read without an outline shows its first and last lines


@dataclass(frozen=True)
class FileSlice:
    """A file read the outline cannot summarize (fewer than two definitions: a slice inside one
    function) with more lines than its ends: `compress_file` shows its first and last lines, and
    the model may choose other lines in their room (summarizer.compress.Renderer)."""

    lines: tuple[str, ...]  # every line, numbered as compress_file shows it
    noted: bool  # compress_file's rendering starts with a note of the imports

    def ends(self) -> frozenset[int]:
        """The indices of the lines compress_file shows."""
        n = len(self.lines)
        return frozenset((*range(_HEAD), *range(n - _TAIL, n)))


def _shown(num: int, code: str, sep: str = "\t") -> str:
    return f"{num:>6}{sep}{code.rstrip()}"


@dataclass(frozen=True)
class FileRead:
    """A file read parsed once: its numbered lines, whether the text carried the numbers, and the
    outline's definitions. `compress_file` renders it; `slice` says whether the model may choose."""

    pairs: list[tuple[int, str]]
    numbered: bool
    defs: list[tuple[int, str]]
    note: str | None
    sep: str = "\t"  # after a line number: the read's own arrow (Claude Code's Read), else a tab

    @classmethod
    def parse(cls, body: str) -> FileRead:
        pairs, numbered, sep = _numbered(body.split("\n"))
        python = sum(1 for _, c in pairs if _PY_DEF.match(c)) > 0 and sum(
            1 for _, c in pairs if c.rstrip().endswith((";", "{"))
        ) < 0.1 * len(pairs)
        defs = [(num, code) for num, code in pairs if _is_definition(code, python)]
        return cls(pairs, numbered, defs, _imports_note(pairs), sep)

    def slice(self) -> FileSlice | None:
        """The read as a FileSlice when its rendering shows only its ends, else None."""
        if len(self.defs) >= 2 or len(self.pairs) <= _HEAD + _TAIL:
            return None
        lines = tuple(_shown(num, code, self.sep) for num, code in self.pairs)
        return FileSlice(lines, self.note is not None)

    def render(self, chars: int, ref: str) -> tuple[str, str, int]:
        """(header, body, dropped chars) of a read of `chars` characters: the outline, or the ends."""
        pairs, defs = self.pairs, self.defs
        out = Out(ref)
        if self.note:
            out.note(self.note)
        if len(defs) < 2:  # a slice inside one function: show its ends instead of an empty outline
            defs = pairs[:_HEAD] + pairs[-_TAIL:] if len(pairs) > _HEAD + _TAIL else pairs
        for num, code in defs[:120] + defs[-30:] if len(defs) > 150 else defs:
            out.keep(_shown(num, code, self.sep))
        out.omit(max(0, chars - sum(len(ln) + 1 for ln in out.lines)))
        first, last = (pairs[0][0], pairs[-1][0]) if pairs else (0, 0)
        where = f"lines {first}-{last}" + ("" if self.numbered else " of output (numbered here)")
        return f"file read: {where}, {len(defs)} outline entries", out.render(), out.dropped


def compress_file(body: str, ref: str) -> tuple[str, str, int]:
    return FileRead.parse(body).render(len(body), ref)


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


def compress_listing(body: str, ref: str) -> tuple[str, str, int]:
    sections = _parse_listing(body.split("\n"))
    out = Out(ref)
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
    header = f"listing: {n_all} entries ({n_dirs} dirs) in {plural(len(sections), 'directory')}"
    return header.replace("directorys", "directories"), out.render(), out.dropped
