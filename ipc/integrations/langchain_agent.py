"""LangChain 1.x / LangGraph: compactd as an ``AgentMiddleware`` of ``create_agent``.

    link = SyncAgentLink(endpoint, agent="coder-1", budget=128_000)
    link.connect()
    agent = create_agent(model, tools, middleware=[CompactdMiddleware(link)])

* :class:`CompactdMiddleware` — ``before_model`` applies the proposals that have arrived to the
  graph state: ``RemoveMessage(REMOVE_ALL_MESSAGES)`` then the compacted list, in which every
  message keeps its id and each digest is a ``HumanMessage`` whose id is the digest's section id
  (recall it through ``compactd mcp``). The checkpointed state is the compacted one.
* :class:`CompactdRequestMiddleware` — ``wrap_model_call`` rewrites only the model request; the
  graph state keeps every original message.

Both mirror the messages into compactd (one DELTA per model call) and never wait for a digest.
Put the system prompt in the messages (a ``SystemMessage``) rather than ``system_prompt=`` if it
should count against the budget compactd keeps.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime

from ipc.client import AgentLink
from ipc.integrations.core import Mirror
from ipc.sections import Section
from ipc.sync import SyncAgentLink


def to_openai(m: BaseMessage) -> dict[str, Any]:
    """One LangChain message as the OpenAI chat message the transcript reads."""
    text = m.text if isinstance(m.text, str) else str(m.content)
    if isinstance(m, SystemMessage):
        return {"role": "system", "content": text}
    if isinstance(m, AIMessage):
        calls = [{"id": c["id"], "function": _function(c["name"], c["args"])} for c in m.tool_calls]
        return {"role": "assistant", "content": text, "tool_calls": calls}
    if isinstance(m, ToolMessage):
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": text}
    return {"role": "user", "content": text}


def _function(name: str, args: Any) -> dict[str, str]:
    return {"name": name, "arguments": json.dumps(args, sort_keys=True)}


def digest_message(section: Section) -> HumanMessage:
    return HumanMessage(content=section.text, id=section.id)


def mirror(link: SyncAgentLink | AgentLink, **kwargs: Any) -> Mirror[AnyMessage]:
    """A Mirror of LangChain messages (kwargs: Mirror's count, on_apply)."""
    return Mirror(link, to_openai=to_openai, digest=digest_message, **kwargs)


class CompactdMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """Applies ready digests to the graph state before each model call."""

    def __init__(self, link: SyncAgentLink | AgentLink, **kwargs: Any) -> None:
        super().__init__()
        self.mirror = mirror(link, **kwargs)

    def _update(self, view: list[AnyMessage]) -> dict[str, Any] | None:
        if not self.mirror.last_applied:
            return None
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *view]}

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self._update(self.mirror.compact(state["messages"]))

    async def abefore_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        if isinstance(self.mirror.link, AgentLink):
            return self._update(await self.mirror.acompact(state["messages"]))
        return self.before_model(state, runtime)


class CompactdRequestMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """Rewrites only the model request; the graph state keeps the originals."""

    def __init__(self, link: SyncAgentLink | AgentLink, **kwargs: Any) -> None:
        super().__init__()
        self.mirror = mirror(link, **kwargs)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any]:
        return handler(request.override(messages=self.mirror.rewrite(request.messages)))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        if isinstance(self.mirror.link, AgentLink):
            messages = await self.mirror.arewrite(request.messages)
        else:
            messages = self.mirror.rewrite(request.messages)
        return await handler(request.override(messages=messages))
