"""mini-swe-agent: CompactdAgent and CompactdModel with its DeterministicModel over a 60-turn real
trajectory and a real daemon: every query within the window, commands never split from outputs."""

from __future__ import annotations

from typing import Any

import pytest

from ipc import SyncAgentLink
from tests.integrations.conftest import BUDGET, LLM_TIME, RESERVE
from watcher.eval.bench.adapters import Chat, approx_tokens
from watcher.eval.bench.players import play_miniswe
from watcher.eval.harness import DaemonProcess


@pytest.mark.parametrize("mode", ["agent", "model"])
async def test_miniswe_keeps_the_window(
    mode: str, token_daemon: DaemonProcess, turns: list[list[Chat]], tokens: dict[str, str], mcp_client: Any
) -> None:
    link = SyncAgentLink(token_daemon.endpoint, "alpha", BUDGET, token=tokens["alpha"], reserve=RESERVE)
    link.connect()
    try:
        played = play_miniswe(link, turns, mode=mode, llm_time=LLM_TIME, count=approx_tokens)
    finally:
        link.close()
    steps = sum(1 for turn in turns[1:] for m in turn if m["role"] == "assistant")
    assert played.calls == steps + 1
    assert not played.invalid, played.invalid[:3]
    assert played.applied and max(played.tokens) <= BUDGET, played.tokens
    assert played.waits == 0 and len(played.step_s) == played.calls
    # a command and its output leave together: no digest replaced one without the other
    for a in played.applied:
        roles = [m["role"] for m in a.messages]
        assert roles.count("assistant") <= roles.count("user") + 1
    client = mcp_client(token_daemon.endpoint, "alpha", tokens["alpha"])
    for a in played.applied[:3]:
        whole = await client.recall_all(a.archive[0])
        assert all(m["content"][:300] in whole for m in a.messages)
