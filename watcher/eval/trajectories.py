"""Load recorded coding-agent trajectories into ordered, turn-grouped context sections.

Three formats are read (see /work/shared/trajectories/SOURCES.md); the format is detected from
the content, never only from the file name:

* mini-swe-agent (`*.traj.json`): `messages[]` of `{role, content}`. One trajectory per file.
* OpenHands V0 evaluation output (`output.jsonl`): one `{instance_id, history[]}` record per
  line (a single record also parses as plain JSON). One trajectory per record.
* SWE-agent 0.x (`*.traj`): `history[]` of `{role, content[, is_demo]}`. One trajectory per file.

A *turn* is what arrives between two LLM calls. Turn 0 holds the system prompt, the task (and
SWE-agent's demonstration, OpenHands' recall observation); every later turn is one LLM step (the
assistant message or OpenHands action(s)) followed by the tool output(s) that answer it.

Mapping (every section carries `meta["source"]` = format and `meta["event"]`):

* system prompt: kind `system`, priority `critical`, pinned.
* the user's task (and any OpenHands user message): kind `user`, priority `critical`.
  Other user messages before the first LLM step (mini-swe-agent/SWE-agent): `user`, `high`.
* SWE-agent demonstration (`is_demo`): kind `user`, priority `low`, `meta["demo"] = "1"`.
* an LLM step: kind `assistant` (mini-swe-agent, SWE-agent, OpenHands `think`/`finish`/agent
  `message`) or `tool_call` (OpenHands `run`/`read`/`edit`/...: text = thought + the command or
  path rendered readably), priority `medium`; its `group` is its own id.
* tool output (mini-swe-agent and SWE-agent user messages after a step, OpenHands observations):
  kind `tool_result`, priority `medium` for all (the planner decides value later), `group` = the
  id of the call it answers. mini-swe-agent's final diff is a `tool_result` with event `submission`
  grouped with the submit step. An OpenHands observation whose call is not in the history (an
  `error` from a malformed tool call) starts its own turn, has no group and `meta["unpaired"]="1"`.
* OpenHands `recall` observation: kind `other`, priority `low` (its `recall` action is skipped: it
  repeats the task and is never shown to the model). Events with no text for the model
  (agent state changes) are skipped; an observation answering an action is never dropped.
* `ts`: OpenHands timestamps as epoch seconds (naive times are taken as UTC); else 0.0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ipc.sections import Section
from watcher.config.source import read_utf8

MINI = "mini-swe-agent"
OPENHANDS = "openhands"
SWE_AGENT = "swe-agent"

MAX_META_VALUE = 4096
COMMAND_META_CHARS = 200  # meta["command"] keeps the first line of a command, clipped to this

Counter = Callable[[str], int]

_RETURNCODE = re.compile(r"<returncode>(-?\d+)</returncode>")
_BASH_BLOCK = re.compile(r"```(?:bash|sh)?\s*\n(.*?)\n```", re.DOTALL)
_OPEN_FILE = re.compile(r"\(Open file: ([^)\n]*)\)")
_SUBMIT_MARK = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_SKIP_ACTIONS = frozenset({"recall", "change_agent_state", "null"})
_SKIP_OBSERVATIONS = frozenset({"agent_state_changed", "null"})
_EDIT_FIELDS = ("insert_line", "old_str", "new_str", "file_text", "content")


class TrajectoryError(ValueError):
    """A trajectory file cannot be loaded; the message names the file (and line for jsonl)."""


@dataclass(frozen=True)
class Trajectory:
    """One recorded agent run: its sections, grouped by turn (turn 0 = prompt and task)."""

    name: str  # the instance id, e.g. "django__django-15629"
    fmt: str  # "mini-swe-agent" | "openhands" | "swe-agent"
    turns: list[list[Section]]

    @property
    def sections(self) -> list[Section]:
        return [s for turn in self.turns for s in turn]


def load(path: str | Path, count: Counter | None = None) -> list[Trajectory]:
    """Load every trajectory in one file (1 for mini-swe-agent and SWE-agent, 1 per jsonl line)."""
    p = Path(path)
    text = read_utf8(p, TrajectoryError)
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise TrajectoryError(f"{p}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
        return _load_jsonl(p, text, count)
    return [_parse_record(whole, str(p), _stem(p), count)]


def load_many(paths: Iterable[str | Path], count: Counter | None = None) -> list[Trajectory]:
    """Load several files, in order."""
    return [t for path in paths for t in load(path, count)]


def _load_jsonl(p: Path, text: str, count: Counter | None) -> list[Trajectory]:
    out: list[Trajectory] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrajectoryError(f"{p}:{lineno}: invalid JSON: {exc.msg}") from exc
        out.append(_parse_record(obj, f"{p}:{lineno}", f"{_stem(p)}-{lineno}", count))
    return out


def _stem(p: Path) -> str:
    name = p.name
    for suffix in (".traj.json", ".traj", ".jsonl", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _detect(obj: object) -> str | None:
    if not isinstance(obj, dict):
        return None
    messages = obj.get("messages")
    if isinstance(messages, list):
        tagged = str(obj.get("trajectory_format", "")).startswith(MINI)
        if tagged or (messages and _all_have(messages, "role")):
            return MINI
    history = obj.get("history")
    if isinstance(history, list):
        if history and _all_have(history, "role"):
            return SWE_AGENT
        events = any(isinstance(e, dict) and ("action" in e or "observation" in e) for e in history)
        if events or (not history and "instance_id" in obj):
            return OPENHANDS
    return None


def _all_have(items: list[Any], key: str) -> bool:
    return all(isinstance(item, dict) and key in item for item in items)


def _parse_record(obj: object, where: str, fallback: str, count: Counter | None) -> Trajectory:
    fmt = _detect(obj)
    if fmt is None or not isinstance(obj, dict):
        raise TrajectoryError(
            f"{where}: unknown trajectory format (expected mini-swe-agent `messages`, "
            "OpenHands `history` events or SWE-agent `history` messages)"
        )
    name = obj.get("instance_id")
    name = name if isinstance(name, str) and name else fallback
    builder = _Builder(fmt, where, count)
    if fmt == MINI:
        _mini(builder, obj)
    elif fmt == OPENHANDS:
        _openhands(builder, obj)
    else:
        _swe_agent(builder, obj)
    return Trajectory(name=name, fmt=fmt, turns=builder.turns)


class _Builder:
    """Accumulates sections into turns and hands out ids `s00000`, `s00001`, ..."""

    def __init__(self, fmt: str, where: str, count: Counter | None) -> None:
        self.fmt = fmt
        self.where = where
        self.count = count
        self.turns: list[list[Section]] = [[]]
        self._n = 0

    @property
    def next_id(self) -> str:
        return f"s{self._n:05d}"

    def fail(self, msg: str) -> TrajectoryError:
        return TrajectoryError(f"{self.where}: {msg}")

    def new_turn(self) -> None:
        self.turns.append([])

    def add(
        self,
        kind: str,
        text: str,
        role: str,
        event: str,
        *,
        priority: str = "medium",
        pinned: bool = False,
        group: str = "",
        ts: float = 0.0,
        meta: dict[str, object] | None = None,
    ) -> Section:
        sid = self.next_id
        self._n += 1
        tokens = self.count(text) if self.count is not None else 0
        section = Section(
            id=sid,
            kind=kind,
            text=text,
            role=role,
            tokens=tokens,
            priority=priority,
            pinned=pinned,
            group=group,
            ts=ts,
            meta=self._meta(event, meta or {}),
        )
        self.turns[-1].append(section)
        return section

    def _meta(self, event: str, extra: dict[str, object]) -> dict[str, str]:
        out = {"source": self.fmt, "event": event}
        for key, value in extra.items():
            if value is not None and value != "":
                out[key] = str(value)[:MAX_META_VALUE]
        return out


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0][:COMMAND_META_CHARS]


# ---------------------------------------------------------------- chat formats (A and C)


def _content(b: _Builder, msg: dict[str, Any], index: int) -> str:
    content = msg.get("content")
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):  # multimodal parts: keep the text ones
        return "\n".join(str(p["text"]) for p in content if isinstance(p, dict) and "text" in p)
    raise b.fail(f"message {index}: content must be a string or a list of parts")


def _messages(b: _Builder, raw: object, key: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not all(isinstance(m, dict) for m in raw):
        raise b.fail(f"`{key}` must be a list of objects")
    return raw


class _Chat:
    """Shared state while walking a role/content message list."""

    def __init__(self, b: _Builder) -> None:
        self.b = b
        self.call = ""  # id of the last assistant step ("" before the first)
        self.has_task = False

    def system(self, text: str) -> None:
        self.b.add("system", text, "system", "system", priority="critical", pinned=True)

    def user_before_steps(self, text: str, demo: bool) -> None:
        if demo:
            self.b.add("user", text, "user", "demo", priority="low", meta={"demo": "1"})
        elif not self.has_task:
            self.has_task = True
            self.b.add("user", text, "user", "task", priority="critical")
        else:
            self.b.add("user", text, "user", "user", priority="high")

    def step(self, text: str, command: str) -> None:
        self.b.new_turn()
        self.call = self.b.next_id
        self.b.add("assistant", text, "assistant", "step", group=self.call, meta={"command": command})

    def output(self, text: str, event: str, meta: dict[str, object] | None = None) -> None:
        self.b.add("tool_result", text, "user", event, group=self.call, meta=meta)


def _mini(b: _Builder, obj: dict[str, Any]) -> None:
    messages = _messages(b, obj.get("messages"), "messages")
    info = obj.get("info")
    submission = info.get("submission") if isinstance(info, dict) else None
    chat = _Chat(b)
    last_step = ""
    for i, msg in enumerate(messages):
        role, text = msg.get("role"), _content(b, msg, i)
        if role == "system":
            chat.system(text)
        elif role == "assistant":
            last_step = text
            block = _BASH_BLOCK.search(text)
            chat.step(text, _first_line(block.group(1)) if block else "")
        elif not chat.call:
            chat.user_before_steps(text, demo=False)
        elif i == len(messages) - 1 and (text == submission or _SUBMIT_MARK in last_step):
            chat.output(text, "submission")
        else:
            code = _RETURNCODE.match(text[:64])
            chat.output(text, "observation", {"exit_code": code.group(1) if code else None})


def _swe_agent(b: _Builder, obj: dict[str, Any]) -> None:
    chat = _Chat(b)
    for i, msg in enumerate(_messages(b, obj.get("history"), "history")):
        role, text = msg.get("role"), _content(b, msg, i)
        if role == "system":
            chat.system(text)
        elif role == "assistant":
            action = msg.get("action")
            chat.step(text, _first_line(action) if isinstance(action, str) else "")
        elif not chat.call:
            chat.user_before_steps(text, demo=bool(msg.get("is_demo")))
        else:
            found = _OPEN_FILE.search(text[-512:])
            path = found.group(1) if found and found.group(1) != "n/a" else None
            chat.output(text, "observation", {"path": path})


# ---------------------------------------------------------------- OpenHands (B)


def _timestamp(raw: object) -> float:
    if not isinstance(raw, str):
        return float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else 0.0
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        return 0.0
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _args(event: dict[str, Any]) -> dict[str, Any]:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def _s(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def _response_id(event: dict[str, Any]) -> str:
    tcm = event.get("tool_call_metadata")
    response = tcm.get("model_response") if isinstance(tcm, dict) else None
    rid = response.get("id") if isinstance(response, dict) else None
    return rid if isinstance(rid, str) else ""


def _join(*parts: str) -> str:
    return "\n\n".join(p for p in parts if p)


def _action_text(action: str, args: dict[str, Any]) -> str:
    """Render an OpenHands tool action readably: the thought, then what the tool was asked."""
    thought = _s(args, "thought")
    if action == "run":
        prefix = "[stdin] " if args.get("is_input") else "$ "
        return _join(thought, prefix + _s(args, "command"))
    if action == "read":
        rng = args.get("view_range")
        lines = f" (lines {rng[0]}-{rng[1]})" if isinstance(rng, list) and len(rng) == 2 else ""
        return _join(thought, f"[read] {_s(args, 'path')}{lines}")
    if action == "edit":
        head = f"[edit {_s(args, 'command') or 'file'}] {_s(args, 'path')}"
        body = [f"{k}:\n{args[k]}" for k in _EDIT_FIELDS if args.get(k) not in (None, "")]
        return _join(thought, "\n".join([head, *body]))
    detail = next((_s(args, k) for k in ("command", "code", "url", "path", "content") if _s(args, k)), "")
    return _join(thought, f"[{action}] {detail}".rstrip())


class _OpenHands:
    """Walks an OpenHands event stream, pairing observations with actions by `cause`."""

    def __init__(self, b: _Builder) -> None:
        self.b = b
        self.calls: dict[str, str] = {}  # action event id -> section id
        self.response = ""  # model response id of the current turn's LLM call

    def event(self, ev: object) -> None:
        if not isinstance(ev, dict):
            return
        if isinstance(ev.get("action"), str):
            self.action(ev, ev["action"])
        elif isinstance(ev.get("observation"), str):
            self.observation(ev, ev["observation"])
        else:
            self.other(ev)

    def add(
        self,
        ev: dict[str, Any],
        kind: str,
        text: str,
        event: str,
        meta: dict[str, object],
        *,
        priority: str = "medium",
        pinned: bool = False,
        group: str = "",
        role: str = "",
    ) -> None:
        role = role or {"system": "system", "user": "user", "other": "user"}.get(kind, "assistant")
        meta = {"event_id": ev.get("id"), **meta}
        ts = _timestamp(ev.get("timestamp"))
        self.b.add(kind, text, role, event, priority=priority, pinned=pinned, group=group, ts=ts, meta=meta)

    def action(self, ev: dict[str, Any], action: str) -> None:
        args = _args(ev)
        if action in _SKIP_ACTIONS:
            return
        if action == "system":
            tools = args.get("tools")
            meta: dict[str, object] = {"tools": len(tools) if isinstance(tools, list) else None}
            self.add(ev, "system", _s(args, "content"), action, meta, priority="critical", pinned=True)
        elif ev.get("source") == "user":
            text = _s(args, "content") or _s(ev, "message")
            self.add(ev, "user", text, action, {}, priority="critical")
        else:
            self.start_step(_response_id(ev))
            sid, key = self.b.next_id, _event_key(ev.get("id"))
            if key:
                self.calls[key] = sid
            kind, text, meta = _render(action, args, ev)
            self.add(ev, kind, text, action, meta, group=sid)

    def start_step(self, response: str) -> None:
        """Open a new turn unless this action came from the same LLM response as the last one."""
        if not response or response != self.response:
            self.b.new_turn()
        self.response = response

    def observation(self, ev: dict[str, Any], obs: str) -> None:
        text, cause, extras = _s(ev, "content"), ev.get("cause"), _extras(ev)
        if obs in _SKIP_OBSERVATIONS:
            return
        if obs == "recall":
            self.add(ev, "other", text, obs, {"recall_type": _s(extras, "recall_type")}, priority="low")
            return
        call = self.calls.get(_event_key(cause), "")
        if not call and cause is None:
            if not text:
                return
            self.b.new_turn()  # an LLM call whose tool call never became an action
            self.response = ""
        metadata = extras.get("metadata")
        meta: dict[str, object] = {
            "exit_code": metadata.get("exit_code") if isinstance(metadata, dict) else None,
            "path": _s(extras, "path"),
            "unpaired": None if call else "1",
        }
        role = "tool" if isinstance(ev.get("tool_call_metadata"), dict) else "user"
        self.add(ev, "tool_result", text, obs, meta, group=call, role=role)

    def other(self, ev: dict[str, Any]) -> None:
        """A history item that is neither action nor observation: kept only if it has text."""
        text = _s(ev, "content") or _s(ev, "message")
        if text:
            self.add(ev, "other", text, "unknown", {}, priority="low")


def _render(action: str, args: dict[str, Any], ev: dict[str, Any]) -> tuple[str, str, dict[str, object]]:
    """Kind, text and meta of an agent action."""
    thought = _s(args, "thought")
    if action == "think":
        return "assistant", thought, {}
    if action == "message":
        return "assistant", _s(args, "content") or _s(ev, "message"), {}
    if action == "finish":
        text = _join(thought, f"[finish] {_s(args, 'final_thought')}".rstrip())
        return "assistant", text, {"task_completed": args.get("task_completed")}
    meta: dict[str, object] = {"path": _s(args, "path"), "command": _first_line(_s(args, "command"))}
    return "tool_call", _action_text(action, args), meta


def _event_key(raw: object) -> str:
    """An event id as a dict key: ids are ints; a missing or odd id never matches (crashes)."""
    return repr(raw) if isinstance(raw, int | str) and not isinstance(raw, bool) else ""


def _extras(ev: dict[str, Any]) -> dict[str, Any]:
    extras = ev.get("extras")
    return extras if isinstance(extras, dict) else {}


def _openhands(b: _Builder, obj: dict[str, Any]) -> None:
    history = obj.get("history")
    if not isinstance(history, list):
        raise b.fail("`history` must be a list")
    walker = _OpenHands(b)
    for ev in history:
        walker.event(ev)
