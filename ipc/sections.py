"""The unit of context: a Section, and how it travels on the wire.

A section is one message, tool call, tool result or digest in an agent's context. This module is
pure data: no sockets, no msgpack. Both the client (`AgentLink`) and the daemon use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

KINDS = frozenset({"system", "user", "assistant", "tool_call", "tool_result", "digest", "other"})
PRIORITIES = ("critical", "high", "medium", "low")
MAX_ID_LEN = 128
MAX_META_ITEMS = 32


class SectionError(ValueError):
    """A section on the wire is malformed; the message says which field and why."""


@dataclass(frozen=True, slots=True)
class Section:
    """One entry of an agent's context window."""

    id: str
    kind: str
    text: str
    role: str = ""
    tokens: int = 0
    priority: str = "medium"
    pinned: bool = False
    group: str = ""  # sections sharing a group (a tool call and its result) are never split
    ts: float = 0.0  # wall-clock time the section entered the context
    meta: dict[str, str] = field(default_factory=dict)

    def with_tokens(self, tokens: int) -> Section:
        return replace(self, tokens=tokens)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "text": self.text}
        if self.role:
            out["role"] = self.role
        if self.tokens:
            out["tokens"] = self.tokens
        if self.priority != "medium":
            out["priority"] = self.priority
        if self.pinned:
            out["pinned"] = True
        if self.group:
            out["group"] = self.group
        if self.ts:
            out["ts"] = self.ts
        if self.meta:
            out["meta"] = dict(self.meta)
        return out

    @classmethod
    def from_wire(cls, obj: object, max_text: int) -> Section:
        """Validate and build a section from a decoded msgpack map; unknown keys are ignored."""
        if not isinstance(obj, dict):
            raise SectionError("section must be a map")
        sid = obj.get("id")
        if not isinstance(sid, str) or not sid or len(sid) > MAX_ID_LEN:
            raise SectionError(f"section.id must be a non-empty string of at most {MAX_ID_LEN} chars")
        kind = obj.get("kind")
        if kind not in KINDS:
            raise SectionError(f"section {sid!r}: kind must be one of {sorted(KINDS)}")
        text = obj.get("text")
        if not isinstance(text, str):
            raise SectionError(f"section {sid!r}: text must be a string")
        if len(text) > max_text:
            raise SectionError(f"section {sid!r}: text longer than {max_text} chars")
        role = _opt(obj, "role", str, "", sid)
        tokens = _opt(obj, "tokens", int, 0, sid)
        if tokens < 0 or tokens > 1 << 31:
            raise SectionError(f"section {sid!r}: tokens out of range")
        priority = _opt(obj, "priority", str, "medium", sid)
        if priority not in PRIORITIES:
            raise SectionError(f"section {sid!r}: priority must be one of {list(PRIORITIES)}")
        pinned = _opt(obj, "pinned", bool, False, sid)
        group = _opt(obj, "group", str, "", sid)
        if len(group) > MAX_ID_LEN:
            raise SectionError(f"section {sid!r}: group longer than {MAX_ID_LEN} chars")
        ts_raw = obj.get("ts", 0.0)
        if isinstance(ts_raw, bool) or not isinstance(ts_raw, (int, float)):
            raise SectionError(f"section {sid!r}: ts must be a number")
        meta_raw = obj.get("meta", {})
        if not isinstance(meta_raw, dict) or len(meta_raw) > MAX_META_ITEMS:
            raise SectionError(f"section {sid!r}: meta must be a map of at most {MAX_META_ITEMS} items")
        meta: dict[str, str] = {}
        for k, v in meta_raw.items():
            if not isinstance(k, str) or not isinstance(v, str) or len(k) > MAX_ID_LEN or len(v) > 4096:
                raise SectionError(f"section {sid!r}: meta keys and values must be short strings")
            meta[k] = v
        return cls(sid, kind, text, role, tokens, priority, pinned, group, float(ts_raw), meta)


def _opt(obj: dict[Any, Any], key: str, typ: type, default: Any, sid: str) -> Any:
    val = obj.get(key, default)
    if typ is int and isinstance(val, bool):
        raise SectionError(f"section {sid!r}: {key} must be an integer")
    if not isinstance(val, typ):
        raise SectionError(f"section {sid!r}: {key} must be of type {typ.__name__}")
    return val
