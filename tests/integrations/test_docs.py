"""Every Python snippet of docs/INTEGRATIONS.md runs against a real daemon."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import pytest

from watcher.eval.harness import DaemonProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "INTEGRATIONS.md"
ALL_SNIPPETS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
# the OpenHands snippet needs Python >= 3.12: tests/integrations/openhands/test_docs_openhands.py runs it
SNIPPETS = [s for s in ALL_SNIPPETS if "ipc.integrations.openhands" not in s]


def offline_model() -> Any:
    """A stub of the Agents SDK's Model interface that answers "Done."."""
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    class Done(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            text = ResponseOutputText(text="Done.", type="output_text", annotations=[])
            msg = ResponseOutputMessage(
                id="m", role="assistant", status="completed", type="message", content=[text]
            )
            return ModelResponse(output=[msg], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return Done()


def test_there_is_a_snippet_per_framework() -> None:
    assert len(ALL_SNIPPETS) == 4
    for name in ("langchain_agent", "openai_agents", "miniswe", "openhands"):
        assert any(f"ipc.integrations.{name}" in s for s in ALL_SNIPPETS), name


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
async def test_snippet_runs(
    index: int, token_daemon: DaemonProcess, tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPACTD_SOCKET", token_daemon.endpoint)
    monkeypatch.setenv("COMPACTD_TOKEN", tokens["alpha"])
    scope: dict[str, Any] = {"__name__": "snippet", "OFFLINE_MODEL": offline_model()}
    await asyncio.to_thread(exec, compile(SNIPPETS[index], f"INTEGRATIONS.md#{index}", "exec"), scope)
    assert os.environ["COMPACTD_SOCKET"] == token_daemon.endpoint
    assert "link" in scope or "main" in scope
