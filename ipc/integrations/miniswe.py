"""mini-swe-agent: a model wrapper and an agent subclass that apply ready compactd digests.

    model = CompactdModel(get_model(...), link)          # rewrites only what the model is sent
    agent = DefaultAgent(model, env, **config)

    agent = CompactdAgent(model, env, link=link, **config)   # agent.messages itself is compacted

mini-swe-agent's messages are ``{"role", "content", "extra"}`` dicts. An assistant message whose
``extra.actions`` holds commands and the observation messages that follow it (``extra.returncode``)
are one unit: a digest never separates a command from its output. Neither class waits for the daemon.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from minisweagent.agents.default import DefaultAgent

from ipc.client import AgentLink
from ipc.integrations.core import Mirror
from ipc.sections import Section
from ipc.sync import SyncAgentLink

Message = dict[str, Any]


class _Pairing:
    """Renders mini-swe-agent messages as OpenAI chat messages, pairing each command with its
    observation (by order, as mini-swe-agent itself does)."""

    def __init__(self) -> None:
        self.steps = 0
        self.pending: list[str] = []

    def __call__(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        role, content = msg.get("role"), msg.get("content")
        text = content if isinstance(content, str) else str(content or "")
        extra = msg.get("extra") or {}
        if role == "assistant" and extra.get("actions"):
            self.steps += 1
            ids = [f"mini-{self.steps}-{i}" for i in range(len(extra["actions"]))]
            self.pending = list(ids)
            calls = [{"id": cid, "function": {"name": "bash", "arguments": ""}} for cid in ids]
            return {"role": "assistant", "content": text, "tool_calls": calls}
        if role == "user" and "returncode" in extra and self.pending:
            return {"role": "tool", "tool_call_id": self.pending.pop(0), "content": text}
        if role in ("system", "user", "assistant"):
            self.pending = []  # a command without its observation stays alone (never split off)
            return {"role": role, "content": text}
        return {"role": "user", "content": text}


def digest_message(section: Section) -> Message:
    return {"role": "user", "content": section.text, "extra": {"compactd_digest": section.id}}


def mirror(link: SyncAgentLink | AgentLink, **kwargs: Any) -> Mirror[Message]:
    """A Mirror of mini-swe-agent messages (kwargs: Mirror's count, on_apply)."""
    return Mirror(link, to_openai=_Pairing(), digest=digest_message, **kwargs)


class CompactdModel:
    """Wraps any mini-swe-agent model: ``query`` sends the compacted messages; the rest delegates."""

    def __init__(self, model: Any, link: SyncAgentLink, **kwargs: Any) -> None:
        self.model = model
        self.mirror = mirror(link, **kwargs)

    def query(self, messages: list[Message], **kwargs: Any) -> Any:
        return self.model.query(self.mirror.rewrite(messages), **kwargs)

    def __getattr__(self, name: str) -> Any:  # config, format_message, get_template_vars, ...
        return getattr(self.model, name)


class CompactdAgent(DefaultAgent):
    """``DefaultAgent`` whose own ``messages`` are compacted before each query."""

    def __init__(
        self,
        model: Any,
        env: Any,
        *,
        link: SyncAgentLink,
        compactd: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, env, **kwargs)
        self.mirror = mirror(link, **(compactd or {}))

    def query(self) -> dict[str, Any]:
        self.messages = self.mirror.compact(self.messages)
        result: dict[str, Any] = super().query()
        return result
