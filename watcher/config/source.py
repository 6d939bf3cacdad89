"""Where a configuration value came from: the TOML file's line for a key, and the error messages.

A small line scan, not a second TOML parser: it maps each table header and key path to the line
that defines it, so an error can say ``path:line: key: message``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """The configuration is invalid; the message names the file, line and key (or the variable)."""


def read_utf8(path: Path, error: Callable[[str], Exception]) -> str:
    """A text file the user named (config, canaries, trajectories), or ``error`` saying why not:
    ``PATH: cannot read: REASON`` or ``PATH: not UTF-8 text: REASON at byte N``."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from exc


@dataclass(frozen=True)
class Value:
    value: Any
    where: str  # "path:line", "path" or "$VARIABLE"


_BARE_RE = re.compile(r"[A-Za-z0-9_-]+")
_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_HEADER_RE = re.compile(rf"^\s*\[\[?\s*({_DOTTED})\s*\]")
_KEY_RE = re.compile(rf"^\s*({_DOTTED})\s*=")
_PART_RE = re.compile(_PART)


def dotted(parts: tuple[str, ...]) -> str:
    return ".".join(p if _BARE_RE.fullmatch(p) else '"' + p.replace('"', '\\"') + '"' for p in parts)


def _split_key(text: str) -> tuple[str, ...]:
    return tuple(p[1:-1] if p[0] in "\"'" else p for p in _PART_RE.findall(text))


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each table header and key path in a TOML source to the (1-based) line defining it.

    A small line scan, not a parser: it skips multi-line strings and does not look inside inline
    tables (:func:`_line_of` falls back to the enclosing key or table).
    """
    out: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    in_string: str | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if in_string is not None:
            if in_string in line:
                in_string = None
            continue
        if m := _HEADER_RE.match(line):
            table = _split_key(m[1])
            defined = table
        elif m := _KEY_RE.match(line):
            defined = table + _split_key(m[1])
        else:
            defined = ()
        for i in range(1, len(defined) + 1):  # "a.b.c = 1" also defines tables a and a.b
            out.setdefault(defined[:i], n)
        for delim in ('"""', "'''"):
            if line.count(delim) % 2:
                in_string = delim
    return out


def _line_of(lines: dict[tuple[str, ...], int], path: tuple[str, ...]) -> int:
    """The line of ``path``, else of its longest defined prefix, else 0."""
    for i in range(len(path), 0, -1):
        if path[:i] in lines:
            return lines[path[:i]]
    return 0


class Source:
    """A parsed file: its tables, and a way to say where a key is."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = _key_lines(text)
        self.last_line = len(text.splitlines())

    def where(self, *path: str) -> str:
        line = _line_of(self.lines, path)
        return f"{self.path}:{line}" if line else str(self.path)


def error(where: str, key: str, msg: str) -> ConfigError:
    return ConfigError(f"{where}: {key}: {msg}" if where else f"{key}: {msg}")


def unknown(name: str, known: list[str], what: str = "key") -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "known: " + ", ".join(known)
    return f"unknown {what} ({hint})"
