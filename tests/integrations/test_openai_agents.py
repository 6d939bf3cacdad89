"""OpenAI Agents SDK: the input filter through Runner.run with a stub Model over a 60-turn real
trajectory (every call within the window), and the Session wrapper across runs."""

from __future__ import annotations

from typing import Any

from ipc import AgentLink
from tests.integrations.conftest import BUDGET, LLM_TIME, RESERVE
from watcher.eval.bench.adapters import Chat, approx_tokens
from watcher.eval.bench.players import play_openai_agents
from watcher.eval.harness import DaemonProcess


async def test_input_filter_keeps_every_call_in_the_window(
    token_daemon: DaemonProcess, turns: list[list[Chat]], tokens: dict[str, str], mcp_client: Any
) -> None:
    async with AgentLink(
        token_daemon.endpoint, "alpha", BUDGET, token=tokens["alpha"], reserve=RESERVE
    ) as link:
        played = await play_openai_agents(link, turns, mode="filter", llm_time=LLM_TIME, count=approx_tokens)
        assert link.reattaches == 0
    steps = sum(1 for turn in turns[1:] for m in turn if m["role"] == "assistant")
    assert played.calls == steps + 1
    assert not played.invalid, played.invalid[:3]  # the SDK's own Chat Completions conversion
    assert played.applied and max(played.tokens) <= BUDGET, played.tokens
    assert played.waits == 0 and len(played.step_s) == played.calls
    client = mcp_client(token_daemon.endpoint, "alpha", tokens["alpha"])
    for a in played.applied[:3]:
        whole = await client.recall_all(a.archive[0])
        for item in a.messages:
            if item.get("type") == "function_call_output":
                assert str(item["output"])[:300] in whole


async def test_session_stores_the_compacted_history(
    token_daemon: DaemonProcess, turns: list[list[Chat]], tokens: dict[str, str]
) -> None:
    async with AgentLink(
        token_daemon.endpoint, "alpha", BUDGET, token=tokens["alpha"], reserve=RESERVE
    ) as link:
        played = await play_openai_agents(link, turns[:31], mode="session", llm_time=LLM_TIME)
    assert not played.invalid, played.invalid[:3]
    assert played.applied  # digests went into the stored history between runs
    # a run starts from the compacted history: the first call of each run is within the window
    firsts = played.tokens[::2]
    assert max(firsts) <= BUDGET, firsts
