"""Recorded trajectories as provider conversations: each turn's sections as OpenAI chat messages or
Anthropic messages, with real tool calls (an LLM step answered by tool output becomes an assistant
message calling a ``bash`` tool, and the output its result), for replaying through the proxy."""

from __future__ import annotations

import json
from typing import Any

from ipc.sections import Section
from watcher.eval.trajectories import Trajectory

Message = dict[str, Any]


def _calls(traj: Trajectory) -> set[str]:
    """Ids of the sections some tool output answers."""
    return {s.group for s in traj.sections if s.kind == "tool_result" and s.group}


def _command(sec: Section) -> str:
    return sec.meta.get("command", "") or sec.text[:200]


def openai_turns(traj: Trajectory) -> list[list[Message]]:
    calls = _calls(traj)
    out: list[list[Message]] = []
    for turn in traj.turns:
        msgs: list[Message] = []
        for s in turn:
            if s.kind == "system":
                msgs.append({"role": "system", "content": s.text})
            elif s.kind in ("assistant", "tool_call"):
                m: Message = {"role": "assistant", "content": s.text}
                if s.id in calls:
                    args = json.dumps({"command": _command(s)})
                    m["tool_calls"] = [
                        {
                            "id": f"call_{s.id}",
                            "type": "function",
                            "function": {"name": "bash", "arguments": args},
                        }
                    ]
                msgs.append(m)
            elif s.kind == "tool_result" and s.group in calls:
                msgs.append({"role": "tool", "tool_call_id": f"call_{s.group}", "content": s.text})
            else:
                msgs.append({"role": "user", "content": s.text})
        out.append(msgs)
    return out


def anthropic_turns(traj: Trajectory) -> tuple[str, list[list[Message]]]:
    """The system prompt and the turns; consecutive messages of one role are merged, so roles
    alternate strictly and every tool_result sits in the user message right after its tool_use
    (a turn starting with the role the last one ended with gets a one-line filler message)."""
    calls = _calls(traj)
    system = "\n\n".join(s.text for s in traj.sections if s.kind == "system")
    out: list[list[Message]] = []
    last_role = ""
    for turn in traj.turns:
        msgs: list[Message] = []
        for s in turn:
            if s.kind == "system":
                continue
            blocks: list[dict[str, Any]]
            if s.kind in ("assistant", "tool_call"):
                role, blocks = "assistant", [{"type": "text", "text": s.text or "(no text)"}]
                if s.id in calls:
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": f"toolu_{s.id}",
                            "name": "bash",
                            "input": {"command": _command(s)},
                        }
                    )
            elif s.kind == "tool_result" and s.group in calls:
                role, blocks = (
                    "user",
                    [{"type": "tool_result", "tool_use_id": f"toolu_{s.group}", "content": s.text}],
                )
            else:
                role, blocks = "user", [{"type": "text", "text": s.text or "(empty)"}]
            if role == last_role and msgs:
                msgs[-1]["content"].extend(blocks)
                continue
            if role == last_role:  # never edit a message an earlier request carried: a filler turn
                other = "user" if role == "assistant" else "assistant"
                msgs.append({"role": other, "content": [{"type": "text", "text": "(continue)"}]})
            msgs.append({"role": role, "content": blocks})
            last_role = role
        out.append(msgs)
    return system, out
