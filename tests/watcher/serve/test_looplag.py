"""The serving loop's lag: a callback that holds the loop shows as lag, a free loop as little."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.fixtures.daemon import wait_until
from watcher.serve.looplag import LoopLag

pytestmark = pytest.mark.serial  # races the machine's own speed (tests/conftest.py)


async def test_a_callback_that_holds_the_loop_shows_as_its_lag() -> None:
    lag = LoopLag(every_s=0.005)
    task = asyncio.create_task(lag.run())
    await wait_until(lambda: lag.samples >= 20, 5, "samples of a free loop")
    free = lag.quantiles()
    asyncio.get_running_loop().call_soon(time.sleep, 0.2)  # a 200 ms callback: what is due waits
    await wait_until(lambda: lag.max_s > 0, 5, "a sample after the hold")
    await wait_until(lambda: lag.samples >= 40, 5, "more samples")
    task.cancel()
    held = lag.quantiles()
    assert held["1"] >= 0.15 and lag.max_s >= 0.15, held
    assert free["0.5"] < 0.1 and held["0.5"] < 0.1, (free, held)  # one late sample is not the median
    stats = lag.stats()
    assert stats["ms_max"] >= 150 and stats["window"] == min(lag.samples, 3000) and stats["every_ms"] == 5.0
