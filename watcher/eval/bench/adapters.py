"""Play a recorded trajectory through an agent framework with a compactd adapter in it.

The framework's own offline model answers with the trajectory's recorded steps (as tool calls),
the tool answers with the recorded outputs, and the model records every request it gets: its
size (the same token counter the adapter sends), whether its roles and tool call/result pairs
are valid, and how long the adapter took. Tests (tests/integrations) and ``compactd bench
adapters`` use the same players.

``llm_time`` is the model's own time per call (a real model takes seconds; the daemon prepares
digests meanwhile), as ``compactd replay --turn-interval``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ipc.adapters import Transcript
from ipc.integrations.core import Applied
from watcher.eval.trajectories import Trajectory

Chat = dict[str, Any]


def approx_tokens(text: str) -> int:
    """The counter adapters and checks share here (the daemon's no-model unit: chars / 3)."""
    return len(text) // 3 + 1


def chat_turns(traj: Trajectory, turns: int) -> list[list[Chat]]:
    """Turn 0 (system prompt, task) and ``turns`` LLM steps as OpenAI chat messages: each step an
    assistant message calling ``bash`` (id ``call_<section id>``), its outputs ``tool`` messages."""
    out: list[list[Chat]] = []
    for n, turn in enumerate(traj.turns[: turns + 1]):
        msgs: list[Chat] = []
        for sec in turn:
            if n == 0 or (sec.kind in ("system", "user") and not sec.group):
                msgs.append({"role": "system" if sec.kind == "system" else "user", "content": sec.text})
            elif sec.kind in ("assistant", "tool_call"):
                command = sec.meta.get("command") or sec.text[-200:]
                call: Chat = {"id": f"call_{sec.id}", "type": "function"}
                call["function"] = {"name": "bash", "arguments": json.dumps({"command": command})}
                msgs.append({"role": "assistant", "content": sec.text, "tool_calls": [call]})
            elif sec.group and msgs and msgs[-1].get("tool_calls"):
                msgs.append({"role": "tool", "tool_call_id": f"call_{sec.group}", "content": sec.text})
            elif sec.group and msgs and msgs[-1]["role"] == "tool":  # a second output of the same call
                msgs[-1]["content"] += "\n" + sec.text
            else:
                msgs.append({"role": "user", "content": sec.text})
        out.append(msgs)
    return out


def check_request(messages: Iterable[Mapping[str, Any]]) -> str:
    """Why an OpenAI-format request would be refused ("" if it would not): a role other than
    system/developer/user/assistant/tool, a tool result whose call is not in the assistant
    message before it, or a call left without its result."""
    waiting: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"message {i}: invalid role {role!r}"
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid not in waiting:
                return f"message {i}: orphan tool result {cid!r}"
            waiting.discard(cid)
            continue
        if waiting:
            return f"message {i}: tool calls {sorted(waiting)} have no result"
        if role == "assistant":
            waiting = {c["id"] for c in m.get("tool_calls") or []}
    return ""


def request_tokens(messages: Iterable[Mapping[str, Any]], count: Callable[[str], int] = approx_tokens) -> int:
    """Tokens of a request, rendered exactly as the adapter's sections are."""
    return sum(s.tokens for s in Transcript("openai", count=count).add(*messages))


@dataclass
class Played:
    calls: int = 0
    tokens: list[int] = field(default_factory=list)  # per model call
    invalid: list[str] = field(default_factory=list)  # check_request's complaints
    applied: list[Applied] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)  # the adapter's own time per call
    call_s: list[float] = field(default_factory=list)  # the whole model call as the framework sees it
    waits: int = 0  # model calls that waited for a digest (the adapters never do)

    def record(self, messages: list[Chat], count: Callable[[str], int] = approx_tokens) -> None:
        self.calls += 1
        self.tokens.append(request_tokens(messages, count))
        why = check_request(messages)
        if why:
            self.invalid.append(f"call {self.calls}: {why}")

    def summary(self, budget: int) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "max_tokens": max(self.tokens, default=0),
            "over_budget": sum(t > budget for t in self.tokens),
            "invalid": len(self.invalid),
            "compactions": len(self.applied),
            "waits": self.waits,
        }


def model_time(llm_time: float) -> None:
    """The model's own time for one call (see the module docstring)."""
    if llm_time > 0:
        time.sleep(llm_time)
