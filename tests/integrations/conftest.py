"""Adapter tests: a real daemon subprocess (no model: deterministic digests) with two agents that
hold tokens, real trajectories, and the MCP server driven by the mcp SDK's own stdio client."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from watcher.eval.bench.adapters import Chat, chat_turns
from watcher.eval.harness import DaemonProcess, running_daemon
from watcher.eval.trajectories import load

# openhands-sdk needs Python >= 3.12: those tests run in .venv-openhands (./dev.sh test runs them)
collect_ignore = ["openhands"] if sys.version_info < (3, 12) else []

TRAJECTORIES = Path(__file__).resolve().parents[3] / "shared" / "trajectories"
TOKENS = {"alpha": "alpha-secret-0123456789", "beta": "beta-secret-9876543210"}
BUDGET = 20_000  # pytest-6197's first 60 turns hold ~60k tokens: compaction must happen
TURNS = 60
LLM_TIME = 0.1  # the model's own time per call (see watcher.eval.bench.adapters)
RESERVE = 0.3  # an adapter never waits: keep room for the digest latency (docs/INTEGRATIONS.md)


@pytest.fixture
async def token_daemon(tmp_path: Path) -> AsyncIterator[DaemonProcess]:
    config = tmp_path / "compactd.toml"
    config.write_text("".join(f'[agents.{a}]\ntoken = "{t}"\n' for a, t in TOKENS.items()))
    async with running_daemon(tmp_path, str(config), model=False) as proc:
        yield proc


@pytest.fixture(scope="session")
def turns() -> list[list[Chat]]:
    traj = load(TRAJECTORIES / "mini-swe-agent" / "pytest-dev__pytest-6197.traj.json")[0]
    out = chat_turns(traj, TURNS)
    assert len(out) == TURNS + 1
    return out


class McpClient:
    """``compactd mcp`` as a subprocess, through the mcp SDK's Client over stdio."""

    def __init__(self, endpoint: str, agent: str, token: str) -> None:
        from mcp.client.stdio import StdioServerParameters

        env = {"COMPACTD_AGENT": agent, "COMPACTD_TOKEN": token, "COMPACTD_SOCKET": endpoint}
        env["PYTHONPATH"] = os.pathsep.join(sys.path)
        self.params = StdioServerParameters(command=sys.executable, args=["-m", "watcher", "mcp"], env=env)

    async def calls(self, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[bool, str]]:
        """(is_error, text) of each tool call, in one MCP session."""
        from mcp import Client

        out = []
        async with Client(self.params) as client:
            for name, args in calls:
                res = await client.call_tool(name, args)
                text = "\n".join(getattr(c, "text", "") for c in res.content)
                out.append((bool(res.is_error), text))
        return out

    async def recall_all(self, ref: str) -> str:
        """Every page of ``recall(ref)``."""
        from mcp import Client

        pages, offset = [], 0
        async with Client(self.params) as client:
            while True:
                res = await client.call_tool("recall", {"ref": ref, "offset": offset})
                text = "\n".join(getattr(c, "text", "") for c in res.content)
                assert not res.is_error, text
                pages.append(text)
                marker = "[more: call again with offset="
                if marker not in text:
                    return "\n".join(pages)
                offset = int(text.rsplit(marker, 1)[1].split("]")[0])


@pytest.fixture
def mcp_client() -> type[McpClient]:
    return McpClient


@pytest.fixture
def tokens() -> dict[str, str]:
    return dict(TOKENS)
