"""Omission markers and the line-by-line builder every compressor renders with."""

from __future__ import annotations

from dataclasses import dataclass

from summarizer.detect import ContentKind

_LINE_MAX = 400  # kept lines longer than this are clipped ...
_LINE_KEEP = 300  # ... to this many characters plus a marker
_PENDING_KEEP = 96  # pending dropped text shorter than this is held so it can be kept verbatim


@dataclass(frozen=True)
class Compressed:
    text: str  # the compressed rendering
    kind: ContentKind
    dropped_chars: int  # how many chars of the input are not in the output


def omission(n_chars: int, ref: str) -> str:
    """The marker that stands for `n_chars` characters the archive keeps under `ref`."""
    return f"[… {n_chars} chars omitted; recall {ref}]"


class Out:
    """Builds a rendering: kept lines verbatim, each run of dropped lines as one omission marker."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self.lines: list[str] = []
        self.dropped = 0
        self.markers = 0  # lines of `lines` that are omission markers
        self._pending: list[str] = []
        self._pending_chars = 0

    def keep(self, line: str) -> None:
        self._flush()
        self.lines.append(self._clip(line))

    def keep_whole(self, line: str) -> None:
        """A kept line, never clipped (logs: a signal may sit anywhere in the line)."""
        self._flush()
        self.lines.append(line)

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
            self.markers += 1
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
            self.markers += 1
            self.dropped += n
        self._pending.clear()
        self._pending_chars = 0

    def _clip(self, line: str) -> str:
        if len(line) <= _LINE_MAX:
            return line
        cut = len(line) - _LINE_KEEP
        self.dropped += cut
        return f"{line[:_LINE_KEEP]} {omission(cut, self.ref)}"


def render_mask(lines: list[str], keep: list[bool], out: Out) -> None:
    for line, kept in zip(lines, keep, strict=True):
        if kept:
            out.keep(line)
        else:
            out.drop(line)


def cap_mask(keep: list[bool], limit: int) -> None:
    """Keep at most `limit` lines: the first 80% and the last 20% of those marked."""
    marked = [i for i, k in enumerate(keep) if k]
    if len(marked) <= limit:
        return
    head = limit * 4 // 5
    for i in marked[head : len(marked) - (limit - head)]:
        keep[i] = False


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("ch") else "s")
