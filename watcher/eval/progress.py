"""A one-line progress bar on stderr for long replays (only when stderr is a terminal)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

BAR_WIDTH = 24


class Progress:
    """``update`` redraws at most 10 times a second; ``close`` ends the line."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.total = max(1, total)
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0
        self.started = time.monotonic()
        self._drawn = 0.0
        self._width = 0

    def update(self, step: int = 1, label: str = "", force: bool = False) -> None:
        self.done += step
        now = time.monotonic()
        if not self.enabled or (not force and now - self._drawn < 0.1 and self.done < self.total):
            return
        self._drawn = now
        frac = min(1.0, self.done / self.total)
        filled = int(frac * BAR_WIDTH)
        bar = "█" * filled + "·" * (BAR_WIDTH - filled)
        elapsed = now - self.started
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        line = f"{bar} {self.done}/{self.total} turns {frac:4.0%} eta {_clock(eta)} {label}"[:160]
        pad = max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
