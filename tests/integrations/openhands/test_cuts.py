"""CompactdCondenser refuses a proposal that would cut the view where the SDK says it must not:
real SDK events (a thinking tool loop, the system prompt), the SDK's own manipulation indices."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openhands.sdk.event import ActionEvent, MessageEvent, ObservationEvent, SystemPromptEvent
from openhands.sdk.llm import Message, MessageToolCall, TextContent, ThinkingBlock
from openhands.sdk.tool.builtins.think import ThinkAction, ThinkObservation

from ipc import SyncAgentLink
from ipc.integrations.openhands import _Cut, _ViewMirror
from ipc.protocol import Proposal
from ipc.sections import Section


def action(n: int, thinking: bool) -> ActionEvent:
    call = MessageToolCall(id=f"c{n}", name="think", arguments='{"thought": "x"}', origin="completion")
    blocks = [ThinkingBlock(thinking="hmm", signature="sig")] if thinking else []
    return ActionEvent(
        thought=[TextContent(text=f"step {n}")],
        thinking_blocks=blocks,
        action=ThinkAction(thought="x"),
        tool_name="think",
        tool_call_id=f"c{n}",
        tool_call=call,
        llm_response_id=f"r{n}",
    )


def observation(act: ActionEvent) -> ObservationEvent:
    return ObservationEvent(
        observation=ThinkObservation.from_text(text=f"output of {act.tool_call_id}"),
        action_id=act.id,
        tool_name="think",
        tool_call_id=act.tool_call_id,
    )


@pytest.fixture
def link() -> Iterator[SyncAgentLink]:
    link = SyncAgentLink("ipc:///nonexistent/compactd.sock", "t", 10_000)  # never connected
    yield link
    link.close()


def test_cuts_only_at_manipulation_indices(link: SyncAgentLink) -> None:
    from openhands.sdk.context.view import View

    system = SystemPromptEvent(system_prompt=TextContent(text="You fix bugs."), tools=[])
    task = MessageEvent(
        source="user", llm_message=Message(role="user", content=[TextContent(text="Fix it.")])
    )
    a1 = action(1, thinking=True)  # a thinking tool loop: a1 o1 a2 o2 is one unit
    o1 = observation(a1)
    a2 = action(2, thinking=False)
    o2 = observation(a2)
    done = MessageEvent(
        source="agent", llm_message=Message(role="assistant", content=[TextContent(text="ok")])
    )
    view = View(events=[system, task, a1, o1, a2, o2, done])
    mirror = _ViewMirror(link)
    mirror._new(view.events)
    mirror._view = view.events
    ids = mirror.transcript.ids  # one section per event, in order

    def proposal(*idx: int) -> Proposal:
        digest = (Section("d1", "digest", "[compactd digest] ..."),)
        return Proposal("p1", 1, tuple(ids[i] for i in idx), digest, 100, 10, 0, ("a1",))

    cut = _Cut(mirror)
    assert mirror.transcript.check(proposal(2, 3)) == ""  # a call and its result: fine for the transcript
    assert "manipulation indices" in cut.check(proposal(2, 3))  # but it cuts the tool loop in two
    assert cut.check(proposal(2, 3, 4, 5)) == ""  # the whole loop
    assert cut.check(proposal(1, 2, 3, 4, 5)) == ""
    assert "system prompt" in cut.check(proposal(0, 1))
