"""A digest's CPU-bound work (facts, rendering, token counts) runs off the caller's event loop
(Summarizer.off_loop), so a daemon serving other clients is not stopped for it; in a process of its
own (the digest worker) it runs in place. Observed through the thread that counts the tokens."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from summarizer.digest import Item, Summarizer, approx_tokens
from summarizer.headtail import HeadTailSummarizer

REGION = [
    Item(
        f"s{i}",
        "tool_result",
        "\n".join(f"line {j}: ERROR in module_{j % 7}.py at /srv/app/x{j}.py:{j}" for j in range(400)),
        4000,
    )
    for i in range(3)
]


def counting(threads: set[int]) -> Callable[[str], int]:
    def count(text: str) -> int:
        threads.add(threading.get_ident())
        return approx_tokens(text)

    return count


@pytest.mark.parametrize("cls", [Summarizer, HeadTailSummarizer])
async def test_the_work_runs_off_the_loop_unless_told_otherwise(cls: type[Summarizer]) -> None:
    loop_thread = threading.get_ident()
    seen: set[int] = set()
    s = cls(None, count=counting(seen))
    ticks = 0

    async def ticker() -> None:  # the loop goes on while the digest is computed elsewhere
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    t = asyncio.create_task(ticker())
    d = await s.digest(REGION, "a1", 1200)
    t.cancel()
    assert d.tokens < d.tokens_before and seen and loop_thread not in seen
    assert ticks > 1
    seen.clear()
    here = cls(None, count=counting(seen), off_loop=False)
    again = await here.digest(REGION, "a1", 1200)
    assert seen == {loop_thread}
    assert again.text == d.text  # the same digest either way
