"""OpenAI Agents SDK (``openai-agents``): a ``call_model_input_filter`` and a ``Session`` wrapper.

    filt = CompactdInputFilter(link)                     # an AgentLink (async) or a SyncAgentLink
    result = await Runner.run(agent, task, run_config=RunConfig(call_model_input_filter=filt))

    session = CompactdSession(SQLiteSession("chat-1"), link)   # history compacted between runs
    result = await Runner.run(agent, "next question", session=session)

* :class:`CompactdInputFilter` rewrites every model call's input (Responses input items) with the
  digests that have arrived; the run's own items keep the originals. The same items always give the
  same input between two compactions, so the provider's prompt cache holds.
* :class:`CompactdSession` wraps any ``Session``: ``get_items`` returns the compacted history and,
  when a digest was applied, stores it in the wrapped session (so the next run starts compacted).

A ``function_call`` and its ``function_call_output`` are one unit: a digest never separates them.
Neither waits for the daemon.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agents import RunConfig
from agents.memory import Session
from agents.run_config import CallModelData, ModelInputData

from ipc.client import AgentLink
from ipc.integrations.core import Mirror
from ipc.sections import Section
from ipc.sync import SyncAgentLink

Item = Any  # TResponseInputItem: a dict (TypedDict) in the Responses input format

__all__ = ["CompactdInputFilter", "CompactdSession", "run_config", "to_openai"]


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", f"[{p.get('type')}]")) if isinstance(p, Mapping) else str(p) for p in content
        )
    return json.dumps(content, sort_keys=True, default=str)


def to_openai(item: Item) -> dict[str, Any]:
    """One Responses input item as the OpenAI chat message the transcript reads."""
    if not isinstance(item, Mapping):
        item = item.model_dump(exclude_unset=True) if hasattr(item, "model_dump") else {"content": str(item)}
    kind = item.get("type")
    if kind == "function_call":
        fn = {"name": str(item.get("name", "")), "arguments": str(item.get("arguments", ""))}
        return {"role": "assistant", "content": "", "tool_calls": [{"id": item["call_id"], "function": fn}]}
    if kind == "function_call_output":
        return {"role": "tool", "tool_call_id": item["call_id"], "content": _text(item.get("output"))}
    role = item.get("role")
    if role in ("system", "developer", "user", "assistant"):
        return {"role": role, "content": _text(item.get("content"))}
    return {"role": "assistant", "content": f"[{kind}] {_text(item.get('summary') or item.get('content'))}"}


def digest_item(section: Section) -> Item:
    return {"role": "user", "content": section.text}


def mirror(link: SyncAgentLink | AgentLink, **kwargs: Any) -> Mirror[Item]:
    """A Mirror of Responses input items (kwargs: Mirror's count, on_apply)."""
    return Mirror(link, to_openai=to_openai, digest=digest_item, **kwargs)


class CompactdInputFilter:
    """``RunConfig(call_model_input_filter=CompactdInputFilter(link))``."""

    def __init__(self, link: SyncAgentLink | AgentLink, **kwargs: Any) -> None:
        self.mirror = mirror(link, **kwargs)

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        items = data.model_data.input
        if isinstance(self.mirror.link, AgentLink):
            items = await self.mirror.arewrite(items)
        else:
            items = self.mirror.rewrite(items)
        return ModelInputData(input=items, instructions=data.model_data.instructions)


def run_config(link: SyncAgentLink | AgentLink, **kwargs: Any) -> RunConfig:
    """A ``RunConfig`` with the compactd input filter (kwargs: Mirror's count, on_apply)."""
    return RunConfig(call_model_input_filter=CompactdInputFilter(link, **kwargs))


class CompactdSession:
    """A ``Session`` whose history is compacted with the digests that have arrived."""

    def __init__(self, inner: Session, link: SyncAgentLink | AgentLink, **kwargs: Any) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.session_settings = getattr(inner, "session_settings", None)
        self.mirror = mirror(link, **kwargs)

    async def get_items(self, limit: int | None = None) -> list[Item]:
        items = await self.inner.get_items()
        if isinstance(self.mirror.link, AgentLink):
            view = await self.mirror.acompact(items)
        else:
            view = self.mirror.compact(items)
        if self.mirror.last_applied:  # store the compacted history: the next run starts from it
            await self.inner.clear_session()
            await self.inner.add_items(view)
        return view[-limit:] if limit else view

    async def add_items(self, items: list[Item]) -> None:
        await self.inner.add_items(items)

    async def pop_item(self) -> Item | None:
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        await self.inner.clear_session()
