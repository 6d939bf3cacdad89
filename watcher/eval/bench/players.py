"""One player per framework: a trajectory (watcher.eval.bench.adapters.chat_turns) played through the
framework's real agent loop with its own offline model, with a compactd adapter (or none: the
baseline of the overhead measurement). Frameworks are imported when a player runs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ipc.sync import SyncAgentLink
from watcher.eval.bench.adapters import Chat, Played, approx_tokens, model_time

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


async def play_openai_agents(
    link: Any,
    turns: list[list[Chat]],
    *,
    mode: str = "filter",
    llm_time: float = 0.0,
    count: Count = approx_tokens,
) -> Played:
    """``Runner.run`` with a stub ``Model`` answering the recorded steps (Responses items: the
    step's text, then its ``function_call``). ``mode``: "filter" (one run, CompactdInputFilter),
    "session" (one run per step, CompactdSession over a SQLiteSession) or "none"."""
    import asyncio

    from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool, set_tracing_disabled
    from agents.models.chatcmpl_converter import Converter
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from ipc.integrations.openai_agents import CompactdInputFilter, CompactdSession

    played = Played()
    clock = _Clock(played)
    steps, outputs = _steps(turns)
    per_run = mode == "session"

    def reply(n: int) -> list[Any]:
        if n >= len(steps):
            return [_message(n, "done", ResponseOutputMessage, ResponseOutputText)]
        out: list[Any] = [_message(n, steps[n]["content"], ResponseOutputMessage, ResponseOutputText)]
        for c in steps[n].get("tool_calls") or []:
            fn = c["function"]
            out.append(
                ResponseFunctionToolCall(
                    id=f"fc_{n}",
                    call_id=c["id"],
                    name="bash",
                    arguments=fn["arguments"],
                    type="function_call",
                )
            )
        return out

    class Replayed(Model):
        def __init__(self) -> None:
            self.n = 0
            self.answered = False  # per_run: the step's tool output came back, end the run

        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
            from agents.items import ModelResponse

            clock.start()
            chat: Any = Converter.items_to_messages(input)
            played.record(chat, count)
            await asyncio.sleep(llm_time)  # the model's own time (see watcher.eval.bench.adapters)
            clock.stop()
            if per_run and self.answered:
                self.answered = False
                return ModelResponse(
                    output=[_message(-1, "ok", ResponseOutputMessage, ResponseOutputText)],
                    usage=Usage(),
                    response_id=None,
                )
            out = reply(self.n)
            self.n += 1
            self.answered = per_run
            return ModelResponse(output=out, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the replay model does not stream")

    answers = iter([outputs.get(c["id"], "(no output)") for m in steps for c in m.get("tool_calls") or []])

    @function_tool
    def bash(command: str) -> str:
        """Run a shell command."""
        return next(answers)

    set_tracing_disabled(True)  # offline: nothing to export traces to
    model = Replayed()
    agent = Agent(name="replay", instructions=None, model=model, tools=[bash])
    first: list[Any] = [{"role": m["role"], "content": m["content"]} for m in turns[0]]
    if mode == "filter":
        filt = CompactdInputFilter(link, count=count, on_apply=played.applied.append)
        await Runner.run(
            agent, first, run_config=RunConfig(call_model_input_filter=filt), max_turns=4 * len(steps) + 10
        )
        played.step_s = list(filt.mirror.stats.step_s)
    elif mode == "none":
        await Runner.run(agent, first, max_turns=4 * len(steps) + 10)
    else:
        session = CompactdSession(SQLiteSession("replay"), link, count=count, on_apply=played.applied.append)
        await Runner.run(agent, first, session=session, max_turns=8)
        while model.n < len(steps):
            await Runner.run(agent, "go on", session=session, max_turns=8)
        played.step_s = list(session.mirror.stats.step_s)
    return played


def _message(n: int, text: str, message: Any, output_text: Any) -> Any:
    return message(
        id=f"msg_{n}",
        role="assistant",
        status="completed",
        type="message",
        content=[output_text(text=text, type="output_text", annotations=[])],
    )


def play_miniswe(
    link: SyncAgentLink | None,
    turns: list[list[Chat]],
    *,
    mode: str = "agent",
    llm_time: float = 0.0,
    count: Count = approx_tokens,
) -> Played:
    """mini-swe-agent's DefaultAgent with its DeterministicModel answering the recorded steps and an
    environment answering with the recorded outputs. ``mode``: "agent" (CompactdAgent), "model"
    (CompactdModel) or "none"."""
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.exceptions import Submitted
    from minisweagent.models.test_models import DeterministicModel, make_output

    from ipc.integrations.miniswe import CompactdAgent, CompactdModel

    played = Played()
    clock = _Clock(played)
    steps, outputs = _steps(turns)
    answers = iter([outputs.get(c["id"], "(no output)") for m in steps for c in m.get("tool_calls") or []])

    class Replayed(DeterministicModel):
        def query(self, messages: list[dict[str, str]], **kwargs: Any) -> dict[str, Any]:
            clock.start()
            played.record([{"role": m["role"], "content": m["content"]} for m in messages], count)
            model_time(llm_time)
            clock.stop()
            result: dict[str, Any] = super().query(messages, **kwargs)
            return result

    class Recorded:
        """An environment that answers each command with the recorded output."""

        def execute(self, action: dict[str, Any], cwd: str = "", **kwargs: Any) -> dict[str, Any]:
            if action.get("command") == "submit":
                raise Submitted({"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}})
            return {"output": next(answers), "returncode": 0, "exception_info": ""}

        def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
            return {}

        def serialize(self) -> dict[str, Any]:
            return {}

    outs = [make_output(m["content"], [{"command": "step"}]) for m in steps]
    outs.append(make_output("done", [{"command": "submit"}]))
    model: Any = Replayed(outputs=outs, observation_template="{{output.output}}", cost_per_call=0.0)  # type: ignore[no-untyped-call]
    env: Any = Recorded()
    config: dict[str, Any] = {
        "system_template": "{{system_text}}",
        "instance_template": "{{task}}",
        "cost_limit": 0.0,
    }
    system = next(m["content"] for m in turns[0] if m["role"] == "system")
    task = "\n".join(m["content"] for m in turns[0] if m["role"] != "system")
    mirror_args: dict[str, Any] = {"count": count, "on_apply": played.applied.append}
    agent: Any
    if mode == "agent":
        assert link is not None
        agent = CompactdAgent(model, env, link=link, compactd=mirror_args, **config)
    elif mode == "model":
        assert link is not None
        model = CompactdModel(model, link, **mirror_args)
        agent = DefaultAgent(model, env, **config)
    else:
        agent = DefaultAgent(model, env, **config)
    agent.run(task, system_text=system)
    mirror = getattr(agent, "mirror", None) or getattr(model, "mirror", None)
    if mirror is not None:
        played.step_s = list(mirror.stats.step_s)
    return played
