"""OpenHands SDK (Python >= 3.12, run by ./dev.sh test in .venv-openhands): CompactdCondenser in a
real Agent + LocalConversation, the SDK's own TestLLM answering a 60-turn real trajectory, a real
daemon: every LLM call within the window, valid requests, the SDK's own view validation passing,
no wait, and the originals recalled through ``compactd mcp`` attached as OpenHands attaches MCP
servers (its own MCP client, from an ``mcp_config`` entry)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from ipc import SyncAgentLink
from tests.integrations.conftest import BUDGET, LLM_TIME, RESERVE
from watcher.eval.bench.adapters import Chat, approx_tokens
from watcher.eval.bench.players_openhands import play_openhands
from watcher.eval.harness import DaemonProcess

ROOT = Path(__file__).resolve().parents[3]


def mcp_command() -> str:
    """``compactd mcp`` comes from the main venv (mcp 2.x; openhands-sdk's fastmcp pins mcp < 2)."""
    cmd = os.environ.get("COMPACTD_MCP_COMMAND") or str(ROOT / ".venv" / "bin" / "compactd")
    assert Path(cmd).exists(), f"{cmd} missing: run ./dev.sh setup (or set COMPACTD_MCP_COMMAND)"
    return cmd


def recall_all(tool: Any, ref: str) -> str:
    pages, offset = [], 0
    marker = "[more: call again with offset="
    while True:
        obs = tool(tool.action_from_arguments({"ref": ref, "offset": offset}))
        text = "\n".join(getattr(c, "text", "") for c in obs.content)
        assert not obs.is_error, text
        pages.append(text)
        if marker not in text:
            return "\n".join(pages)
        offset = int(text.rsplit(marker, 1)[1].split("]")[0])


def test_python_and_sdk() -> None:
    assert sys.version_info >= (3, 12)
    import openhands.sdk

    assert openhands.sdk.__version__.startswith("1.58")


@pytest.mark.slow
def test_openhands_condenser_keeps_the_window(
    token_daemon: DaemonProcess, turns: list[list[Chat]], tokens: dict[str, str]
) -> None:
    from openhands.sdk.mcp import MCPServer, create_mcp_tools

    link = SyncAgentLink(token_daemon.endpoint, "alpha", BUDGET, token=tokens["alpha"], reserve=RESERVE)
    link.connect()
    try:
        played = play_openhands(link, turns, llm_time=LLM_TIME, count=approx_tokens)
    finally:
        link.close()
    steps = sum(1 for turn in turns[1:] for m in turn if m["role"] == "assistant")
    assert played.calls == steps + 1  # every recorded step, then the closing answer
    assert not played.invalid, played.invalid[:3]  # roles, tool pairs, the SDK's view properties
    assert len(played.applied) >= 3, "the window is small: compaction must have happened"
    assert max(played.tokens) <= BUDGET, (max(played.tokens), played.tokens)
    assert played.waits == 0
    # without compactd the same run overflows the window: the test can fail
    assert sum(approx_tokens(m["content"] or "") for turn in turns for m in turn) > 2 * BUDGET

    env = {
        "COMPACTD_AGENT": "alpha",
        "COMPACTD_TOKEN": tokens["alpha"],
        "COMPACTD_SOCKET": token_daemon.endpoint,
    }
    config = {"compactd": MCPServer(command=mcp_command(), args=["mcp"], env=env)}
    with create_mcp_tools(config, timeout=60) as client:
        recall = next(t for t in client.tools if t.name == "recall")
        for a in played.applied[:3]:
            whole = recall_all(recall, a.archive[0])
            for event in a.messages:
                text = next((c.text for c in event.to_llm_message().content if hasattr(c, "text")), "")
                assert text[:300] in whole
        # another agent's reference: refused (the server reads for alpha only)
        obs = recall(recall.action_from_arguments({"ref": "a999999"}))
        assert obs.is_error or "not found" in "".join(getattr(c, "text", "") for c in obs.content).lower()
