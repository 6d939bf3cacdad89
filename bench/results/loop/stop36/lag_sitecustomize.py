"""Loop-lag probe: in every process that runs an asyncio loop, a timer every 5 ms records how late
it fires (the loop's lag: what a frame arriving then waits before its callback runs); written to
/tmp/prof/lag-<role>-PID.json at exit. role: daemon (argv has run --socket) or bench."""

import asyncio.base_events as be
import atexit
import json
import os
import sys
import time
from pathlib import Path

role = "daemon" if ("run" in sys.argv and any("--socket" in a for a in sys.argv)) else "bench"
lags: list[float] = []
orig = be.BaseEventLoop.run_forever
PERIOD = 0.005


def run_forever(self):  # type: ignore[no-untyped-def]
    state = {"due": time.monotonic() + PERIOD}

    def tick() -> None:
        now = time.monotonic()
        lags.append(now - state["due"])
        state["due"] = now + PERIOD
        self.call_later(PERIOD, tick)

    self.call_later(PERIOD, tick)
    return orig(self)


be.BaseEventLoop.run_forever = run_forever


def dump() -> None:
    if len(lags) < 100:
        return
    xs = sorted(lags)

    def q(p: float) -> float:
        return round(xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000, 2)

    out = {"n": len(xs), "p50": q(50), "p90": q(90), "p99": q(99), "p999": q(99.9)}
    out["max"] = round(xs[-1] * 1000, 1)
    for ms in (10, 30, 50):
        out[f"over{ms}"] = sum(x > ms / 1000 for x in xs)
    Path("/tmp/prof").mkdir(exist_ok=True)
    Path(f"/tmp/prof/lag-{role}-{os.getpid()}.json").write_text(json.dumps(out))


atexit.register(dump)
import cbprobe  # noqa
