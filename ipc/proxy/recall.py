"""``--recall-tool``: the model reads what digests replaced, and the agent never sees it happen.

A non-streaming request whose upstream body carries a digest or an elision note is offered one
more tool, ``compactd_recall`` (appended to ``tools``; the same bytes every time, so the prompt
cache keeps it). When the model's answer calls it and nothing else, the proxy answers each call
(from the daemon's archive over the conversation's own link: RECALL is scoped to that agent; an
elided message from the proxy's copy), appends the call and its results to the upstream request and
asks again — up to ``MAX_ROUNDS`` times — and the agent gets only the final answer. An answer that
calls the agent's own tools next to compactd_recall goes to the agent with the recall calls taken
out (the agent cannot answer them). Streaming requests are forwarded without the tool: a stream
the agent is already reading cannot be taken back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from ipc.proxy import wire

NAME = "compactd_recall"
MAX_ROUNDS = 3
DESCRIPTION = (
    "Read the original text that compactd replaced with a digest or left out of this conversation. "
    "ref: the archive reference a digest names ('a17'), a section id ('m12'), or a digest id."
)
_SCHEMA = {
    "type": "object",
    "properties": {"ref": {"type": "string", "description": "archive reference or section id"}},
    "required": ["ref"],
}
TOOL = {
    "openai": wire.encode(
        {"type": "function", "function": {"name": NAME, "description": DESCRIPTION, "parameters": _SCHEMA}}
    ),
    "anthropic": wire.encode({"name": NAME, "description": DESCRIPTION, "input_schema": _SCHEMA}),
}
_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])

Call = tuple[str, str]  # (tool call id, ref)
Fetch = Callable[[bytes], Awaitable[tuple[int, bytes]]]  # upstream body -> (status, answer)
Answer = Callable[[str], Awaitable[str]]  # ref -> the text for the model


def offer(api: wire.Api, body: bytes) -> bytes:
    """``body`` with compactd_recall appended to its ``tools`` (created if absent)."""
    top = _TOP.decode(body)
    tools = _LIST.decode(top["tools"]) if "tools" in top and bytes(top["tools"]) != b"null" else []
    top["tools"] = msgspec.Raw(b"[" + b",".join([*(bytes(t) for t in tools), TOOL[api]]) + b"]")
    return wire.encode(top)


def calls(api: wire.Api, answer: dict[str, Any]) -> tuple[list[Call], int]:
    """The compactd_recall calls in a model answer, and how many other tool calls it makes."""
    ours: list[Call] = []
    others = 0
    for cid, name, args in _tool_calls(api, answer):
        if name != NAME:
            others += 1
            continue
        ref = args.get("ref") if isinstance(args, dict) else None
        ours.append((cid, str(ref or "").strip()))
    return ours, others


def _tool_calls(api: wire.Api, answer: dict[str, Any]) -> list[tuple[str, str, Any]]:
    out: list[tuple[str, str, Any]] = []
    if api == "anthropic":
        for b in answer.get("content") or []:
            if isinstance(b, dict) and b.get("type") == "tool_use":
                out.append((str(b.get("id")), str(b.get("name")), b.get("input")))
        return out
    for c in _openai_message(answer).get("tool_calls") or []:
        fn = c.get("function") or {} if isinstance(c, dict) else {}
        try:
            args = msgspec.json.decode(fn.get("arguments") or "{}")
        except msgspec.DecodeError:
            args = {}
        out.append((str(c.get("id")), str(fn.get("name")), args))
    return out


def _openai_message(answer: dict[str, Any]) -> dict[str, Any]:
    choices = answer.get("choices") or [{}]
    msg = choices[0].get("message") if isinstance(choices[0], dict) else None
    return msg if isinstance(msg, dict) else {}


def follow_up(api: wire.Api, body: bytes, answer: dict[str, Any], results: list[tuple[str, str]]) -> bytes:
    """The upstream body again, with the model's call and the recall results appended."""
    req = wire.parse(api, body)
    if api == "anthropic":
        turn = {"role": "assistant", "content": answer.get("content") or []}
        blocks = [{"type": "tool_result", "tool_use_id": cid, "content": text} for cid, text in results]
        added = [wire.encode(turn), wire.encode({"role": "user", "content": blocks})]
    else:
        msg = {k: v for k, v in _openai_message(answer).items() if v is not None}
        added = [wire.encode(msg)]
        added += [
            wire.encode({"role": "tool", "tool_call_id": cid, "content": text}) for cid, text in results
        ]
    return wire.rebuild(req, [*req.messages, *added])


def strip(api: wire.Api, answer: dict[str, Any]) -> dict[str, Any]:
    """The answer without compactd_recall calls (what the agent may see)."""
    if api == "anthropic":
        content = [
            b
            for b in answer.get("content") or []
            if not (isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") == NAME)
        ]
        out = {**answer, "content": content}
        if answer.get("stop_reason") == "tool_use" and not any(b.get("type") == "tool_use" for b in content):
            out["stop_reason"] = "end_turn"
        return out
    msg = _openai_message(answer)
    kept = [c for c in msg.get("tool_calls") or [] if (c.get("function") or {}).get("name") != NAME]
    new_msg = {k: v for k, v in msg.items() if k != "tool_calls"}
    if kept:
        new_msg["tool_calls"] = kept
    choice = {**answer["choices"][0], "message": new_msg}
    if choice.get("finish_reason") == "tool_calls" and not kept:
        choice["finish_reason"] = "stop"
    return {**answer, "choices": [choice, *answer["choices"][1:]]}


async def run(api: wire.Api, body: bytes, fetch: Fetch, answer_ref: Answer) -> tuple[int, bytes, int]:
    """Ask upstream; while the model calls only compactd_recall, answer and ask again. Returns the
    final status and answer (recall calls taken out) and the number of recall calls answered."""
    status, data = await fetch(body)
    answered = 0
    for round_ in range(MAX_ROUNDS + 1):
        if status != 200:
            return status, data, answered
        try:
            answer = msgspec.json.decode(data)
        except msgspec.DecodeError:
            return status, data, answered
        if not isinstance(answer, dict):
            return status, data, answered
        ours, others = calls(api, answer)
        if not ours:
            return status, data, answered
        if others or round_ == MAX_ROUNDS:
            return status, wire.encode(strip(api, answer)), answered
        results = [(cid, await answer_ref(ref)) for cid, ref in ours]
        answered += len(results)
        body = follow_up(api, body, answer, results)
        status, data = await fetch(body)
    return status, data, answered  # not reached: the last round returns above
