"""The serving loop's lag: how late it runs what is due.

A frame that arrives while the loop is busy (a long callback, the interpreter lock held by another
thread, no free core on the machine) waits that long before its callback runs; every agent's
ingest latency carries it. A timer every :data:`LAG_EVERY_S` measures how late it fires. STATUS
``daemon.loop_lag`` reports the percentiles over the last :data:`LAG_WINDOW` samples and the
largest since start; Prometheus ``compactd_loop_lag_seconds{quantile}``. It is the daemon's share
of what an agent measures: what the agent sees on top of it is its own process and the sockets
(the load benchmark reports both)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

LAG_EVERY_S = 0.01  # the timer's period: 100 samples a second, a few microseconds each
LAG_WINDOW = 3000  # samples the percentiles are over (30 s at LAG_EVERY_S)
STATS_EVERY_S = 1.0  # the percentiles are sorted at most this often (stalled agents ask STATUS often)


class LoopLag:
    def __init__(self, every_s: float = LAG_EVERY_S, window: int = LAG_WINDOW) -> None:
        self.every_s = every_s
        self._lags: deque[float] = deque(maxlen=window)
        self.samples = 0
        self.max_s = 0.0  # since start
        self._cached: tuple[float, dict[str, Any]] | None = None  # (when, stats)

    async def run(self) -> None:
        """Sample until cancelled (the server's lifetime)."""
        loop = asyncio.get_running_loop()
        due = loop.time() + self.every_s
        while True:
            await asyncio.sleep(max(0.0, due - loop.time()))
            now = loop.time()
            self.add(max(0.0, now - due))
            due = now + self.every_s

    def add(self, lag_s: float) -> None:
        self._lags.append(lag_s)
        self.samples += 1
        self.max_s = max(self.max_s, lag_s)

    def quantiles(self) -> dict[str, float]:
        """Seconds: {"0.5": p50, "0.99": p99, "1": the window's largest} (zeros before a sample)."""
        xs = sorted(self._lags)
        if not xs:
            return {"0.5": 0.0, "0.99": 0.0, "1": 0.0}
        return {q: xs[min(len(xs) - 1, int(float(q) * len(xs)))] for q in ("0.5", "0.99", "1")}

    def stats(self) -> dict[str, Any]:
        """STATUS ``daemon.loop_lag``: ms over the window (sorted at most once a second)."""
        now = time.monotonic()
        if self._cached is None or now - self._cached[0] >= STATS_EVERY_S:
            q = self.quantiles()
            self._cached = (
                now,
                {
                    "ms_p50": round(q["0.5"] * 1000, 2),
                    "ms_p99": round(q["0.99"] * 1000, 2),
                    "ms_max_window": round(q["1"] * 1000, 2),
                    "ms_max": round(self.max_s * 1000, 2),
                    "window": len(self._lags),
                    "samples": self.samples,
                    "every_ms": round(self.every_s * 1000, 1),
                },
            )
        return self._cached[1]
