"""grep output: hits grouped per file, with counts."""

from __future__ import annotations

import re

from summarizer.compress.out import Out, plural

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


def compress_grep(body: str, ref: str) -> tuple[str, str, int]:
    groups, binary, unparsed = _group_hits(body.split("\n"))
    out = Out(ref)
    shown_files = 30
    per_file = 20 if len(groups) == 1 else max(2, min(8, 60 // max(1, min(len(groups), shown_files))))
    for path, hits in list(groups.items())[:shown_files]:
        out.note(f"{path or '(no file name)'} ({plural(len(hits), 'match')})")
        for hit in hits[:per_file]:
            out.keep(f"  {hit}")
    rest = list(groups.items())[shown_files:]
    if rest:
        names = ", ".join(f"{p} ({len(h)})" for p, h in rest[:10])
        more = f", … +{len(rest) - 10}" if len(rest) > 10 else ""
        out.note(f"{plural(len(rest), 'more file')} ({sum(len(h) for _, h in rest)} matches): {names}{more}")
    if binary:
        names = ", ".join(binary[:5]) + (f", … +{len(binary) - 5}" if len(binary) > 5 else "")
        out.note(f"binary file matches ({len(binary)}): {names}")
    if unparsed:
        out.note(f"{plural(unparsed, 'other line')}")
    shown = sum(len(ln) + 1 for ln in out.lines)
    out.omit(max(0, len(body) - shown))
    n_hits = sum(len(h) for h in groups.values())
    header = f"grep: {plural(n_hits, 'match')} in {plural(len(groups), 'file')}"
    return header + (f", {len(binary)} binary" if binary else ""), out.render(), out.dropped
