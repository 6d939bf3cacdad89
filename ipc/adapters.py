"""Provider message lists ⇄ sections: OpenAI chat messages and Anthropic messages.

A :class:`Transcript` holds the agent's message list in the provider's own format, with a section
id per message. ``add`` turns new messages into sections to stream to the daemon; ``apply`` puts
an ACKed proposal back onto the message list (the digest becomes a user message):

    transcript = Transcript("openai")
    await link.append(*transcript.add(*new_messages))
    ...
    proposal = await link.proposals.get()
    if await link.apply(proposal, onto=transcript):   # NACKs what the transcript cannot take
        response = client.chat.completions.create(model=..., messages=transcript.messages)

A tool call and its results are one unit: the assistant message that calls tools and the messages
that carry their results share a section ``group``, and a proposal that would replace part of a
group, or a group whose results have not all arrived, is refused (providers reject a tool result
whose call is gone, and a call without its result). One message is one section.

Message formats (only what is read here):
- OpenAI: ``{"role": "system"|"developer"|"user"|"assistant"|"tool", "content": str | [parts],
  "tool_calls": [{"id", "function": {"name", "arguments"}}], "tool_call_id": str}``.
- Anthropic: ``{"role": "user"|"assistant", "content": str | [blocks]}`` with blocks ``text``,
  ``tool_use`` (``id``, ``name``, ``input``), ``tool_result`` (``tool_use_id``, ``content``,
  ``is_error``), ``image``, ``document``, ``thinking``; the top-level system prompt may be given
  as ``system=`` and becomes a critical section that is not part of ``messages``.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from ipc.protocol import Proposal
from ipc.sections import Section

Flavor = Literal["openai", "anthropic"]
Message = dict[str, Any]
DIGEST_MARK = "[compactd digest]"


class AdapterError(ValueError):
    """A message is not in the expected format, or a proposal does not fit the message list."""


class Transcript:
    def __init__(
        self,
        flavor: Flavor,
        messages: Iterable[Mapping[str, Any]] = (),
        *,
        system: str | None = None,
        prefix: str = "m",
        count: Callable[[str], int] | None = None,
    ) -> None:
        if flavor not in ("openai", "anthropic"):
            raise AdapterError(f"unknown flavor {flavor!r}: openai or anthropic")
        if system is not None and flavor != "anthropic":
            raise AdapterError("system= is for Anthropic; OpenAI has system messages")
        self.flavor: Flavor = flavor
        self.messages: list[Message] = []
        self.ids: list[str] = []  # the section id of each message
        self._sections: dict[str, Section] = {}
        self._call_group: dict[str, str] = {}  # tool call id → group
        self._open: dict[str, set[str]] = {}  # group → tool call ids still waiting for a result
        self._new_calls: list[str] = []  # tool call ids registered by the add() in progress
        self._prefix = prefix
        self._seq = itertools.count(1)
        self._count = count
        self.system: Section | None = None
        if system is not None:
            self.system = self._section(f"{prefix}0", "system", system, "system", "critical", "")
        self.add(*messages)

    # --- messages → sections ---------------------------------------------------------------------
    def add(self, *messages: Mapping[str, Any]) -> list[Section]:
        """Append provider messages; returns their sections, to send with ``link.append``.

        All or nothing: on AdapterError the transcript is as before."""
        out: list[Section] = []
        n, waiting = len(self.messages), {g: set(c) for g, c in self._open.items()}
        self._new_calls = []
        try:
            for msg in messages:
                if not isinstance(msg, Mapping):
                    raise AdapterError(f"a message must be a mapping, got {type(msg).__name__}")
                sid = f"{self._prefix}{next(self._seq)}"
                sec = self._openai(sid, msg) if self.flavor == "openai" else self._anthropic(sid, msg)
                self.messages.append(dict(msg))
                self.ids.append(sid)
                self._sections[sid] = sec
                out.append(sec)
        except AdapterError:
            for sec in out:
                del self._sections[sec.id]
            del self.messages[n:], self.ids[n:]
            for cid in self._new_calls:
                self._call_group.pop(cid, None)
            self._open = waiting
            raise
        return out

    def section(self, sid: str) -> Section | None:
        """The section of a message in the list (or of a digest), None if there is none."""
        return self._sections.get(sid)

    def sections(self) -> list[Section]:
        """Every section, in order (for ``link.snapshot``)."""
        head = [self.system] if self.system is not None else []
        return head + [self._sections[i] for i in self.ids]

    def _section(self, sid: str, kind: str, text: str, role: str, priority: str, group: str) -> Section:
        tokens = self._count(text) if self._count is not None else 0
        return Section(sid, kind, text, role, tokens, priority, False, group, time.time())

    def _openai(self, sid: str, msg: Mapping[str, Any]) -> Section:
        role = msg.get("role")
        text = _openai_text(msg.get("content"))
        if role in ("system", "developer"):
            return self._section(sid, "system", text, str(role), "critical", "")
        if role == "user":
            return self._section(sid, "user", text, role, "high", "")
        if role == "assistant":
            calls = msg.get("tool_calls") or []
            if not calls:
                return self._section(sid, "assistant", text, role, "medium", "")
            lines = [text] if text else []
            ids = []
            for call in calls:
                cid, name, args = _openai_call(call)
                ids.append(cid)
                lines.append(f"{name}({args})")
            group = self._open_group(sid, ids)
            return self._section(sid, "tool_call", "\n".join(lines), role, "medium", group)
        if role in ("tool", "function"):
            call_id = msg.get("tool_call_id") or msg.get("name")
            if not isinstance(call_id, str):
                raise AdapterError("a tool message needs tool_call_id")
            group = self._close(call_id)
            return self._section(sid, "tool_result", text, role, "low", group)
        raise AdapterError(f"unknown OpenAI role {role!r}")

    def _anthropic(self, sid: str, msg: Mapping[str, Any]) -> Section:
        role = msg.get("role")
        if role not in ("user", "assistant"):
            raise AdapterError(f"unknown Anthropic role {role!r} (the system prompt goes in system=)")
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise AdapterError("Anthropic content must be a string or a list of blocks")
        lines: list[str] = []
        calls: list[str] = []
        results: list[str] = []
        for block in blocks:
            if not isinstance(block, Mapping):
                raise AdapterError("an Anthropic content block must be a mapping")
            kind = block.get("type")
            if kind == "text":
                lines.append(str(block.get("text", "")))
            elif kind == "tool_use":
                cid = block.get("id")
                if not isinstance(cid, str):
                    raise AdapterError("a tool_use block needs an id")
                calls.append(cid)
                lines.append(f"{block.get('name')}({json.dumps(block.get('input'), sort_keys=True)})")
            elif kind == "tool_result":
                cid = block.get("tool_use_id")
                if not isinstance(cid, str):
                    raise AdapterError("a tool_result block needs tool_use_id")
                results.append(cid)
                body = _anthropic_text(block.get("content"))
                lines.append(f"[error] {body}" if block.get("is_error") else body)
            else:
                lines.append(f"[{kind}]")
        text = "\n".join(line for line in lines if line)
        if calls:
            if role != "assistant":
                raise AdapterError("tool_use blocks belong in assistant messages")
            return self._section(sid, "tool_call", text, role, "medium", self._open_group(sid, calls))
        if results:
            groups = {self._close(cid) for cid in results}
            if len(groups) != 1:  # results for calls of several assistant messages: cannot pair
                raise AdapterError("one message holds results of tool calls from different messages")
            return self._section(sid, "tool_result", text, role, "low", groups.pop())
        if role == "user":
            return self._section(sid, "user", text, role, "high", "")
        return self._section(sid, "assistant", text, role, "medium", "")

    def _open_group(self, sid: str, call_ids: list[str]) -> str:
        group = f"tool:{sid}"
        for cid in call_ids:
            if cid in self._call_group:
                raise AdapterError(f"tool call id {cid!r} used twice")
            self._call_group[cid] = group
            self._new_calls.append(cid)
        self._open[group] = set(call_ids)
        return group

    def _close(self, call_id: str) -> str:
        group = self._call_group.get(call_id)
        if group is None:
            raise AdapterError(f"tool result for unknown call {call_id!r} (its call must come first)")
        waiting = self._open.get(group)
        if waiting is not None:
            waiting.discard(call_id)
            if not waiting:
                del self._open[group]
        return group

    # --- proposals → messages --------------------------------------------------------------------
    def check(self, proposal: Proposal) -> str:
        """Why ``apply`` would fail (the agent then NACKs it as rejected); "" if it would not."""
        ids = proposal.replaces
        if not ids:
            return "empty proposal"
        try:
            start = self.ids.index(ids[0])
        except ValueError:
            return f"section {ids[0]} is not a message of this transcript"
        stop = start + len(ids)
        if self.ids[start:stop] != list(ids):
            return "replaced sections are not consecutive messages of this transcript"
        inside = set(ids)
        for group in {self._sections[i].group for i in ids} - {""}:
            if group in self._open:
                return f"tool call {group} still waits for results"
            outside = [i for i in self.ids if self._sections[i].group == group and i not in inside]
            if outside:
                return f"would split tool call group {group} (keeps {', '.join(outside)})"
        for d in proposal.digest:
            if d.id in self._sections and d.id not in inside:
                return f"digest id {d.id} already in use"
        return ""

    def apply(self, proposal: Proposal) -> None:
        """Replace the proposal's messages by its digest as user message(s); AdapterError if not."""
        reason = self.check(proposal)
        if reason:
            raise AdapterError(reason)
        start = self.ids.index(proposal.replaces[0])
        stop = start + len(proposal.replaces)
        for sid in proposal.replaces:
            gone = self._sections.pop(sid)
            if gone.group:
                for cid in [c for c, g in self._call_group.items() if g == gone.group]:
                    del self._call_group[cid]
        self.messages[start:stop] = [self._digest_message(d.text) for d in proposal.digest]
        self.ids[start:stop] = [d.id for d in proposal.digest]
        for d in proposal.digest:
            self._sections[d.id] = d

    def _digest_message(self, text: str) -> Message:
        if not text.startswith("[compactd digest"):
            text = f"{DIGEST_MARK} {text}"
        if self.flavor == "openai":
            return {"role": "user", "content": text}
        return {"role": "user", "content": [{"type": "text", "text": text}]}


def _openai_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise AdapterError("OpenAI content must be a string, a list of parts or null")
    out = []
    for part in content:
        if not isinstance(part, Mapping):
            raise AdapterError("an OpenAI content part must be a mapping")
        if part.get("type") == "text":
            out.append(str(part.get("text", "")))
        elif part.get("type") == "refusal":
            out.append(str(part.get("refusal", "")))
        else:
            out.append(f"[{part.get('type')}]")
    return "\n".join(out)


def _openai_call(call: Any) -> tuple[str, str, str]:
    if not isinstance(call, Mapping) or not isinstance(call.get("id"), str):
        raise AdapterError("each tool_calls entry needs an id")
    fn = call.get("function") or {}
    if not isinstance(fn, Mapping):
        raise AdapterError("tool_calls[].function must be a mapping")
    return call["id"], str(fn.get("name", "")), str(fn.get("arguments", ""))


def _anthropic_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise AdapterError("tool_result content must be a string or a list of blocks")
    return "\n".join(
        str(b.get("text", "")) if isinstance(b, Mapping) and b.get("type") == "text" else "[content]"
        for b in content
    )
