"""LangChain 1.x: both middlewares in a real create_agent graph, a 60-turn real trajectory, a real
daemon: every model call within the window, valid requests, no wait, originals recallable."""

from __future__ import annotations

from typing import Any

import pytest

from ipc import SyncAgentLink
from tests.integrations.conftest import BUDGET, LLM_TIME, RESERVE
from watcher.eval.bench.adapters import Chat, Played, approx_tokens
from watcher.eval.bench.players import play_langchain
from watcher.eval.harness import DaemonProcess


async def check_originals(played: Played, endpoint: str, token: str, mcp_client: Any) -> None:
    """Every replaced message's text is in what ``compactd mcp`` recalls for the digest."""
    client = mcp_client(endpoint, "alpha", token)
    for a in played.applied[:3]:
        whole = await client.recall_all(a.archive[0])
        for m in a.messages:
            text = m.text if isinstance(m.text, str) else str(m.content)
            assert text[:300] in whole


def assert_played(played: Played, turns: list[list[Chat]]) -> None:
    steps = sum(1 for turn in turns[1:] for m in turn if m["role"] == "assistant")
    assert played.calls == steps + 1  # every recorded step, then the closing answer
    assert not played.invalid, played.invalid[:3]
    assert played.applied, "the window is small: compaction must have happened"
    assert max(played.tokens) <= BUDGET, (max(played.tokens), played.tokens)
    assert played.waits == 0
    assert len(played.step_s) == played.calls


@pytest.mark.parametrize("mode", ["state", "request"])
async def test_langchain_middleware_keeps_the_window(
    mode: str,
    token_daemon: DaemonProcess,
    turns: list[list[Chat]],
    tokens: dict[str, str],
    mcp_client: Any,
) -> None:
    link = SyncAgentLink(token_daemon.endpoint, "alpha", BUDGET, token=tokens["alpha"], reserve=RESERVE)
    link.connect()
    try:
        played = play_langchain(link, turns, mode=mode, llm_time=LLM_TIME, count=approx_tokens)
        assert link.reattaches == 0 if hasattr(link, "reattaches") else True
    finally:
        link.close()
    assert_played(played, turns)
    # without compactd the same run overflows the window: the test can fail
    assert sum(approx_tokens(m["content"] or "") for turn in turns for m in turn) > 2 * BUDGET
    await check_originals(played, token_daemon.endpoint, tokens["alpha"], mcp_client)
