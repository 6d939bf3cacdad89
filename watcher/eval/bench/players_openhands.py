"""The OpenHands SDK player (``openhands-sdk``, Python >= 3.12): a trajectory played through a real
``Agent`` in a ``LocalConversation``, its own offline model (``openhands.sdk.testing.TestLLM``)
answering with the recorded steps and a ``bash`` tool answering with the recorded outputs, with
:class:`ipc.integrations.openhands.CompactdCondenser` as the agent's condenser (or none: the
baseline of the overhead measurement).

Besides what every player records (watcher.eval.bench.adapters.Played), the SDK's own view
validation is checked after the run: the view rebuilt from every event of the conversation
(``View.from_events``) must equal the one the agent kept, with no property of the SDK's
(``ALL_PROPERTIES``: batch atomicity, tool call matching, ...) dropping an event.

``python -m watcher.eval.bench.players_openhands SPEC.json`` plays one run and prints the Played as
JSON: ``compactd bench adapters`` runs it in the OpenHands venv when its own Python has no SDK.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ipc.sync import SyncAgentLink
from watcher.eval.bench.adapters import Chat, Played, approx_tokens, model_time
from watcher.eval.bench.players import Count, _Clock, _steps


def view_problems(events: Sequence[Any], kept: Sequence[Any]) -> list[str]:
    """What the SDK's own validation says of a conversation: the view rebuilt from all its
    events must hold the events the agent kept, and no view property may drop one."""
    from openhands.sdk.context.view import View
    from openhands.sdk.context.view.properties import ALL_PROPERTIES

    out = []
    rebuilt = View()
    for e in events:
        rebuilt.append_event(e)
    for prop in ALL_PROPERTIES:
        dropped = prop.enforce(rebuilt.events, events)
        if dropped:
            out.append(f"{type(prop).__name__} drops {len(dropped)} events")
    if [e.id for e in rebuilt.events] != [e.id for e in kept]:
        out.append("the view rebuilt from the events differs from the agent's")
    return out


def play_openhands(link: SyncAgentLink | None, turns: list[list[Chat]], **options: Any) -> Played:
    """``options``: ``mode`` "condenser" (CompactdCondenser, the default) or "none"; ``llm_time``
    (seconds, default 0); ``count`` (the token counter, default approx_tokens)."""
    mode: str = options.get("mode", "condenser")
    llm_time: float = options.get("llm_time", 0.0)
    count: Count = options.get("count", approx_tokens)
    from openhands.sdk import Agent, Conversation
    from openhands.sdk.llm import Message, MessageToolCall, TextContent
    from openhands.sdk.testing import TestLLM

    from ipc.integrations.openhands import CompactdCondenser

    played = Played()
    clock = _Clock(played)
    steps, outputs = _steps(turns)
    answers = iter([outputs.get(c["id"], "(no output)") for m in steps for c in m.get("tool_calls") or []])
    _register_bash(answers)

    scripted: list[Message | Exception] = [
        Message(
            role="assistant",
            content=[TextContent(text=m["content"] or "")],
            tool_calls=[
                MessageToolCall(
                    id=c["id"], name="bash", arguments=c["function"]["arguments"], origin="completion"
                )
                for c in m.get("tool_calls") or []
            ],
        )
        for m in steps
    ]
    scripted.append(Message(role="assistant", content=[TextContent(text="done")]))

    class Replayed(TestLLM):
        def completion(self, messages: list[Message], *args: Any, **kwargs: Any) -> Any:
            clock.start()
            played.record(self.format_messages_for_llm(messages), count)
            model_time(llm_time)
            clock.stop()
            return super().completion(messages, *args, **kwargs)

    from openhands.sdk.tool import Tool

    llm = Replayed.from_messages(scripted)
    condenser = None
    if mode != "none":
        assert link is not None
        condenser = CompactdCondenser(link, count=count, on_apply=played.applied.append)
    system = "\n".join(m["content"] for m in turns[0] if m["role"] == "system")
    task = "\n".join(m["content"] for m in turns[0] if m["role"] != "system")
    agent = Agent(
        llm=llm,
        tools=[Tool(name="bash")],
        include_default_tools=[],
        system_prompt=system,
        condenser=condenser,
    )
    with tempfile.TemporaryDirectory(prefix="compactd-openhands-") as work:
        conv: Any = Conversation(
            agent=agent,
            workspace=work,
            visualizer=None,
            stuck_detection=False,
            max_iteration_per_run=8 * len(scripted) + 20,
        )
        conv.send_message(task)
        conv.run()
        state = conv.state
        played.invalid += view_problems(list(state.events), state.view.events)
        conv.close()
    if condenser is not None and condenser.mirror is not None:
        played.step_s = list(condenser.mirror.stats.step_s)
    return played


_ANSWERS: list[Any] = []  # [the iterator of recorded outputs of the run in progress]


def _register_bash(answers: Any) -> None:
    """The ``bash`` tool of the replay: each call answers with the next recorded output."""
    from openhands.sdk.tool import Action, Observation, ToolDefinition, ToolExecutor, register_tool
    from pydantic import Field

    first = not _ANSWERS
    _ANSWERS[:] = [answers]
    if not first:
        return  # registered once per process

    class BashAction(Action):
        command: str = Field(description="The shell command to run.")

    class BashObservation(Observation):
        pass

    class Recorded(ToolExecutor[BashAction, BashObservation]):
        def __call__(self, action: BashAction, conversation: Any = None) -> BashObservation:
            obs: BashObservation = BashObservation.from_text(text=next(_ANSWERS[0]))
            return obs

    class BashTool(ToolDefinition[BashAction, BashObservation]):
        @classmethod
        def create(cls, conv_state: Any = None, **params: Any) -> Sequence[BashTool]:
            return [
                cls(
                    description="Run a shell command.",
                    action_type=BashAction,
                    observation_type=BashObservation,
                    executor=Recorded(),
                )
            ]

    register_tool("bash", BashTool)


def main(argv: list[str]) -> int:
    """Play one run described by a JSON file (endpoint, agent, budget, reserve, turns, mode,
    llm_time) and print the Played's figures as JSON."""
    spec = json.loads(Path(argv[0]).read_text())
    link = None
    if spec["mode"] != "none":
        link = SyncAgentLink(spec["endpoint"], spec["agent"], spec["budget"], reserve=spec["reserve"])
        link.connect()
    try:
        played = play_openhands(link, spec["turns"], mode=spec["mode"], llm_time=spec["llm_time"])
    finally:
        if link is not None:
            link.close()
    out = {k: v for k, v in played.__dict__.items() if k != "applied"}
    out["applied"] = [a.archive for a in played.applied]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
