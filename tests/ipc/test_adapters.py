"""Provider message lists ⇄ sections: tool calls and their results stay together, digests come
back as user messages, and a proposal that would orphan a tool result is refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipc.adapters import AdapterError, Transcript
from ipc.context import Context
from ipc.protocol import Proposal
from ipc.sections import Section

OPENAI: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test in tests/test_io.py"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"p": "a.py"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "read", "arguments": '{"p": "b.py"}'}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "def a(): ..."},
    {"role": "tool", "tool_call_id": "call_2", "content": "def b(): ..."},
    {"role": "assistant", "content": [{"type": "text", "text": "Both read."}]},
    {"role": "user", "content": "go on"},
]

ANTHROPIC: list[dict[str, Any]] = [
    {"role": "user", "content": "Fix the failing test"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "tu_1", "name": "read", "input": {"p": "a.py"}},
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "boom", "is_error": True}],
    },
    {"role": "assistant", "content": "It fails."},
    {"role": "user", "content": [{"type": "text", "text": "then fix it"}, {"type": "image", "source": {}}]},
]


def digest(did: str = "compactd-d1", text: str = "[compactd digest of 3 sections] facts") -> Section:
    return Section(did, "digest", text, "user", 5, "high", meta={"archive": "a1"})


def proposal(*ids: str, did: str = "compactd-d1") -> Proposal:
    return Proposal("p1", 1, ids, (digest(did),), 100, 5, 50, ("a1",))


def test_openai_messages_become_sections_with_tool_groups() -> None:
    t = Transcript("openai", OPENAI, count=len)
    secs = t.sections()
    assert [s.kind for s in secs] == [
        "system",
        "user",
        "tool_call",
        "tool_result",
        "tool_result",
        "assistant",
        "user",
    ]
    assert secs[2].group == secs[3].group == secs[4].group != ""
    assert secs[2].text == 'read({"p": "a.py"})\nread({"p": "b.py"})'
    assert secs[0].priority == "critical" and secs[3].priority == "low"
    assert secs[5].text == "Both read." and secs[1].tokens == len(secs[1].text)
    assert t.ids == ["m1", "m2", "m3", "m4", "m5", "m6", "m7"] and len(t.messages) == 7


def test_anthropic_blocks_become_sections_and_system_is_separate() -> None:
    t = Transcript("anthropic", ANTHROPIC, system="be brief")
    secs = t.sections()
    assert secs[0].kind == "system" and secs[0].id == "m0" and len(t.messages) == 5
    assert [s.kind for s in secs[1:]] == ["user", "tool_call", "tool_result", "assistant", "user"]
    assert secs[2].group == secs[3].group != ""
    assert secs[2].text == 'Reading.\nread({"p": "a.py"})'
    assert secs[3].text == "[error] boom" and secs[5].text == "then fix it\n[image]"


@pytest.mark.parametrize("flavor", ["openai", "anthropic"])
def test_apply_replaces_whole_groups_with_a_user_digest(flavor: str) -> None:
    msgs = OPENAI if flavor == "openai" else ANTHROPIC
    t = Transcript(flavor, msgs)  # type: ignore[arg-type]
    ids = ("m2", "m3", "m4", "m5") if flavor == "openai" else ("m1", "m2", "m3")
    p = proposal(*ids)
    assert t.check(p) == ""
    t.apply(p)
    assert "compactd-d1" in t.ids and not set(ids) & set(t.ids)
    i = t.ids.index("compactd-d1")
    msg = t.messages[i]
    assert msg["role"] == "user"
    text = msg["content"] if flavor == "openai" else msg["content"][0]["text"]
    assert text == "[compactd digest of 3 sections] facts"
    assert len(t.messages) == len(msgs) - len(ids) + 1 == len(t.ids)
    assert_no_orphans(t)


def test_plain_digest_text_gets_the_mark() -> None:
    t = Transcript("openai", OPENAI)
    t.apply(Proposal("p", 1, ("m6",), (digest(text="short"),), 9, 1, 0, ()))
    assert t.messages[5] == {"role": "user", "content": "[compactd digest] short"}


@pytest.mark.parametrize(
    ("ids", "why"),
    [
        (("m2", "m3", "m4"), "split"),  # the call and one result, the other result stays
        (("m4", "m5", "m6"), "split"),  # results without their call
        (("m3",), "split"),
        (("m2", "m4"), "consecutive"),
        (("m9",), "not a message"),
        ((), "empty"),
    ],
)
def test_proposals_that_would_orphan_or_misfit_are_refused(ids: tuple[str, ...], why: str) -> None:
    t = Transcript("openai", OPENAI)
    p = proposal(*ids)
    assert why in t.check(p)
    before = (list(t.messages), list(t.ids))
    with pytest.raises(AdapterError):
        t.apply(p)
    assert (t.messages, t.ids) == before


def test_a_call_still_waiting_for_results_is_not_replaced() -> None:
    t = Transcript("openai", OPENAI[:4])  # call_2 has no result yet
    assert "waits" in t.check(proposal("m3", "m4"))
    t.add(OPENAI[4])
    assert t.check(proposal("m3", "m4", "m5")) == ""


def test_digest_id_collision_is_refused() -> None:
    t = Transcript("openai", OPENAI)
    assert "in use" in t.check(proposal("m6", did="m7"))


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "tool", "tool_call_id": "nope", "content": "x"},
        {"role": "robot", "content": "x"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]},
        {"role": "user", "content": 5},
        "not a map",
    ],
)
def test_bad_openai_messages_change_nothing(bad: Any) -> None:
    t = Transcript("openai", OPENAI[:2])
    with pytest.raises(AdapterError):
        t.add({"role": "user", "content": "fine"}, bad)
    assert len(t.messages) == len(t.ids) == 2 and len(t.sections()) == 2
    assert t.add({"role": "user", "content": "later"})[0].id in ("m4", "m5")  # never m3 twice


def test_bad_anthropic_messages() -> None:
    t = Transcript("anthropic")
    for bad in (
        {"role": "system", "content": "x"},
        {"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "x"}]},
        {"role": "user", "content": {"type": "text"}},
    ):
        with pytest.raises(AdapterError):
            t.add(bad)
    with pytest.raises(AdapterError):
        Transcript("openai", system="x")


def test_transcript_follows_the_link_context() -> None:
    """The agent's Context and its message list stay in step through a proposal."""
    t = Transcript("openai", OPENAI)
    ctx = Context(t.sections(), version=1)
    p = proposal("m2", "m3", "m4", "m5")
    assert ctx.stale_reason(p) == "" and t.check(p) == ""
    ctx.apply_proposal(p, 2)
    t.apply(p)
    assert ctx.ids() == t.ids == [s.id for s in t.sections()]


def assert_no_orphans(t: Transcript) -> None:
    """Every tool result follows the message with its call (OpenAI: tool_call_id; Anthropic: id)."""
    seen: set[str] = set()
    for m in t.messages:
        if m.get("role") == "assistant":
            seen |= {c["id"] for c in m.get("tool_calls") or []}
            if isinstance(m.get("content"), list):
                seen |= {b["id"] for b in m["content"] if b.get("type") == "tool_use"}
        if m.get("role") == "tool":
            assert m["tool_call_id"] in seen
        if isinstance(m.get("content"), list):
            for b in m["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    assert b["tool_use_id"] in seen


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_any_accepted_proposal_leaves_no_orphan_tool_result(data: st.DataObject) -> None:
    """Random conversations, random contiguous proposals: check() and apply() agree, and whatever
    is applied keeps every tool result with its call."""
    flavor = data.draw(st.sampled_from(["openai", "anthropic"]))
    t = Transcript(flavor)
    n_turns = data.draw(st.integers(1, 6))
    for k in range(n_turns):
        t.add(user_msg(flavor, f"u{k}"))
        calls = data.draw(st.integers(0, 3))
        if calls:
            cids = [f"c{k}_{j}" for j in range(calls)]
            t.add(call_msg(flavor, cids), *result_msgs(flavor, cids))
    for round_ in range(3):
        start = data.draw(st.integers(0, len(t.ids) - 1))
        stop = data.draw(st.integers(start + 1, len(t.ids)))
        p = proposal(*t.ids[start:stop], did=f"compactd-d{round_}")
        if t.check(p) == "":
            t.apply(p)
        else:
            with pytest.raises(AdapterError):
                t.apply(p)
        assert_no_orphans(t)
        assert len(t.messages) == len(t.ids)


def user_msg(flavor: str, text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def call_msg(flavor: str, cids: list[str]) -> dict[str, Any]:
    if flavor == "openai":
        calls = [{"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}} for c in cids]
        return {"role": "assistant", "content": None, "tool_calls": calls}
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": c, "name": "f", "input": {}} for c in cids],
    }


def result_msgs(flavor: str, cids: list[str]) -> list[dict[str, Any]]:
    if flavor == "openai":
        return [{"role": "tool", "tool_call_id": c, "content": f"out {c}"} for c in cids]
    blocks = [{"type": "tool_result", "tool_use_id": c, "content": f"out {c}"} for c in cids]
    return [{"role": "user", "content": blocks}]
