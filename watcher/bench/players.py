"""One player per framework: a trajectory (watcher.bench.adapters.chat_turns) played through the
framework's real agent loop with its own offline model, with a compactd adapter (or none: the
baseline of the overhead measurement). Frameworks are imported when a player runs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ipc.sync import SyncAgentLink
from watcher.bench.adapters import Chat, Played, approx_tokens, model_time

Count = Callable[[str], int]


def _steps(turns: list[list[Chat]]) -> tuple[list[Chat], dict[str, str]]:
    """The assistant steps after turn 0, and each tool call's recorded output by call id."""
    steps = [m for turn in turns[1:] for m in turn if m["role"] == "assistant"]
    outputs = {m["tool_call_id"]: m["content"] for turn in turns[1:] for m in turn if m["role"] == "tool"}
    return steps, outputs


class _Clock:
    """The framework's time between two model calls (tools, middleware, the adapter)."""

    def __init__(self, played: Played) -> None:
        self.played = played
        self.last = 0.0

    def start(self) -> None:
        now = time.perf_counter()
        if self.last:
            self.played.call_s.append(now - self.last)

    def stop(self) -> None:
        self.last = time.perf_counter()


def play_langchain(
    link: SyncAgentLink | None,
    turns: list[list[Chat]],
    *,
    mode: str = "state",
    llm_time: float = 0.0,
    count: Count = approx_tokens,
) -> Played:
    """``create_agent`` with ``GenericFakeChatModel`` answering the recorded steps; ``mode`` is
    "state" (CompactdMiddleware), "request" (CompactdRequestMiddleware) or "none"."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
    from langchain_core.messages import convert_to_openai_messages as to_openai
    from langchain_core.outputs import ChatResult
    from langchain_core.tools import tool

    from ipc.integrations.langchain_agent import CompactdMiddleware, CompactdRequestMiddleware

    played = Played()
    clock = _Clock(played)
    steps, outputs = _steps(turns)
    replies = [
        AIMessage(
            content=m["content"],
            tool_calls=[
                {"name": "bash", "args": json.loads(c["function"]["arguments"]), "id": c["id"]}
                for c in m.get("tool_calls") or []
            ],
        )
        for m in steps
    ] + [AIMessage(content="done")]

    class Replayed(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
            clock.start()
            played.record(to_openai(messages), count)
            model_time(llm_time)
            clock.stop()
            return super()._generate(messages, *args, **kwargs)

    answers = iter([outputs.get(c["id"], "(no output)") for m in steps for c in m.get("tool_calls") or []])

    @tool
    def bash(command: str) -> str:
        """Run a shell command."""
        return next(answers)  # the calls come in the recorded order, one per step

    middleware: list[Any] = []
    if mode != "none":
        assert link is not None
        cls = CompactdMiddleware if mode == "state" else CompactdRequestMiddleware
        middleware.append(cls(link, count=count, on_apply=played.applied.append))
    agent = create_agent(Replayed(messages=iter(replies)), [bash], middleware=middleware)
    first = [(SystemMessage if m["role"] == "system" else HumanMessage)(m["content"]) for m in turns[0]]
    state: Any = {"messages": first}
    agent.invoke(state, config={"recursion_limit": 4 * len(replies) + 20})
    if middleware:
        played.step_s = list(middleware[0].mirror.stats.step_s)
    return played
