"""The OpenHands snippet of docs/INTEGRATIONS.md runs against a real daemon (Python >= 3.12)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from watcher.eval.harness import DaemonProcess

DOC = Path(__file__).resolve().parents[3] / "docs" / "INTEGRATIONS.md"


async def test_openhands_snippet_runs(
    token_daemon: DaemonProcess, tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import re

    snippets = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    (snippet,) = [s for s in snippets if "ipc.integrations.openhands" in s]
    monkeypatch.setenv("COMPACTD_SOCKET", token_daemon.endpoint)
    monkeypatch.setenv("COMPACTD_TOKEN", tokens["alpha"])
    monkeypatch.chdir(tmp_path)  # the snippet's workspace="."
    scope: dict[str, Any] = {"__name__": "snippet"}
    await asyncio.to_thread(exec, compile(snippet, "INTEGRATIONS.md#openhands", "exec"), scope)
    conversation = scope["conversation"]
    assert conversation.state.execution_status.value == "finished"
    assert scope["agent"].condenser.mirror.stats.calls >= 1  # the condenser saw the view
