"""The unit of context: a Section, and how it travels on the wire.

A section is one message, tool call, tool result or digest in an agent's context. This module is
pure data: no sockets, no msgpack. Both the client (`AgentLink`) and the daemon use it.
"""

from __future__ import annotations

import sys
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Final

KINDS = frozenset({"system", "user", "assistant", "tool_call", "tool_result", "digest", "other"})
PRIORITIES = ("critical", "high", "medium", "low")
MAX_ID_LEN = 128
MAX_META_ITEMS = 32
MAX_META_VALUE = 4096  # chars
MAX_TOKENS = 1 << 31
MAX_TS = 1e11  # seconds since 1970 (year 5138): rejects inf and nonsense


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
        """Validate and build a section from a decoded msgpack map; unknown keys are ignored.

        On the ingest hot path: exact type checks (decoded msgpack has exact types), no helpers."""
        if type(obj) is not dict:
            raise SectionError("section must be a map")
        get = obj.get
        sid = get("id")
        if type(sid) is not str or not 0 < len(sid) <= MAX_ID_LEN or not sid.isprintable():
            raise SectionError(
                f"section.id must be a non-empty printable string of at most {MAX_ID_LEN} chars"
            )
        kind = get("kind")
        if type(kind) is not str or kind not in KINDS:
            raise SectionError(f"section {sid!r}: kind must be one of {sorted(KINDS)}")
        text = get("text")
        if type(text) is not str:
            raise SectionError(f"section {sid!r}: text must be a string")
        if len(text) > max_text:
            raise SectionError(f"section {sid!r}: text longer than {max_text} chars")
        role = get("role", "")
        if type(role) is not str or len(role) > MAX_ID_LEN:
            raise SectionError(f"section {sid!r}: role must be a string of at most {MAX_ID_LEN} chars")
        tokens = get("tokens", 0)
        if type(tokens) is not int or not 0 <= tokens <= MAX_TOKENS:
            raise SectionError(f"section {sid!r}: tokens must be an int in [0, {MAX_TOKENS}]")
        priority = get("priority", "medium")
        if type(priority) is not str or priority not in _PRIORITY_SET:
            raise SectionError(f"section {sid!r}: priority must be one of {list(PRIORITIES)}")
        pinned = get("pinned", False)
        if type(pinned) is not bool:
            raise SectionError(f"section {sid!r}: pinned must be a bool")
        group = get("group", "")
        if type(group) is not str or len(group) > MAX_ID_LEN:
            raise SectionError(f"section {sid!r}: group must be a string of at most {MAX_ID_LEN} chars")
        ts = get("ts", 0.0)
        if (type(ts) is not float and type(ts) is not int) or not 0 <= ts < MAX_TS:
            raise SectionError(f"section {sid!r}: ts must be a finite number of seconds since 1970")
        meta_raw = get("meta", _NO_META)
        meta = {} if meta_raw is _NO_META else _meta(meta_raw, sid)
        return cls(sid, kind, text, role, tokens, priority, pinned, group, float(ts), meta)


_NO_META: dict[str, str] = {}
_PRIORITY_SET = frozenset(PRIORITIES)


def _meta(raw: object, sid: str) -> dict[str, str]:
    if type(raw) is not dict or len(raw) > MAX_META_ITEMS:
        raise SectionError(f"section {sid!r}: meta must be a map of at most {MAX_META_ITEMS} items")
    for k, v in raw.items():
        if type(k) is not str or type(v) is not str or len(k) > MAX_ID_LEN or len(v) > MAX_META_VALUE:
            raise SectionError(f"section {sid!r}: meta keys and values must be short strings")
    return dict(raw)


# --- texts held compressed ---------------------------------------------------------------------------
# A mirror holds every section of every agent's context for as long as it is there, and most of
# those bytes are long tool outputs (logs, listings, diffs) that deflate 4-8x. A long text is held
# as a PackedText: ``Section.text`` still reads as the str (unpacked on each read, ~400 MB/s), so
# nothing that reads a section changes; what reads every section often (the scorer's cache key,
# the byte meter) uses text_key / text_bytes / text_len, which do not unpack.
PACK_MIN_CHARS: Final = 1024  # shorter texts are not packed: little to gain per object
PACK_LEVEL: Final = 1  # zlib's fastest level: ~160 MB/s on the shared trajectories, ~8x on long texts
_WBITS: Final = -15  # raw deflate: no header or checksum


class PackedText:
    """A section's text, deflated: its UTF-8 (``surrogatepass``) as raw deflate, with what the
    meter and the scorer read without unpacking: its sizes and its str's hash."""

    __slots__ = ("data", "key", "nbytes", "nchars")

    def __init__(self, data: bytes, nbytes: int, nchars: int, key: int) -> None:
        self.data = data
        self.nbytes = nbytes  # UTF-8 length of the text
        self.nchars = nchars  # len() of the text
        self.key = key  # hash() of the text as a str: text_key is the same packed or not

    def unpack(self) -> str:
        return zlib.decompress(self.data, _WBITS).decode("utf-8", "surrogatepass")


_text_slot: Final = Section.__dict__["text"]  # the member descriptor of the slot
_get_text: Final = _text_slot.__get__
_set_text: Final = _text_slot.__set__


class _Text:
    """``Section.text``: the slot's str, or its PackedText unpacked."""

    __slots__ = ()

    def __get__(self, obj: Section | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        held = _get_text(obj)
        return held.unpack() if type(held) is PackedText else held  # a str (or a subclass of one)

    def __set__(self, obj: Section, value: str) -> None:
        _set_text(obj, value)


setattr(Section, "text", _Text())  # noqa: B010  (replaces the slot's descriptor; the slot stays)


def packed(sec: Section) -> Section:
    """``sec`` with its text held deflated, if it is at least :data:`PACK_MIN_CHARS` long and
    that takes less memory; else ``sec`` itself. The result equals ``sec`` and reads the same (as
    a plain str: a text that was a subclass of str, such as LangChain's ``TextAccessor``, reads
    back as its str value)."""
    held = _get_text(sec)
    if type(held) is PackedText or len(held) < PACK_MIN_CHARS:
        return sec
    raw = held.encode("utf-8", "surrogatepass")
    data = zlib.compress(raw, PACK_LEVEL, _WBITS)
    if len(data) + _PACKED_OVERHEAD >= sys.getsizeof(held):
        return sec
    out = replace(sec)
    _set_text(out, PackedText(data, len(raw), len(held), hash(held)))
    return out


def is_packed(sec: Section) -> bool:
    return type(_get_text(sec)) is PackedText


def text_key(sec: Section) -> int:
    """``hash(sec.text)``, without unpacking it (the same for a section and its packed copy).
    O(1) after the first call: a str caches its hash."""
    held = _get_text(sec)
    return held.key if type(held) is PackedText else hash(held)


def held_size(sec: Section) -> int:
    """The bytes ``sec``'s text takes in memory as held (its str, or its packed form)."""
    held = _get_text(sec)
    if type(held) is PackedText:
        return sys.getsizeof(held) + sys.getsizeof(held.data)
    return sys.getsizeof(held)


def text_len(sec: Section) -> int:
    """``len(sec.text)``, without unpacking it."""
    held = _get_text(sec)
    return held.nchars if type(held) is PackedText else len(held)


def text_bytes(sec: Section) -> int:
    """The UTF-8 length of ``sec.text`` (lone surrogates as 3 bytes), without unpacking it."""
    held = _get_text(sec)
    return held.nbytes if type(held) is PackedText else utf8_len(held)


def utf8_len(s: str) -> int:
    """``len(s.encode("utf-8", "surrogatepass"))``, without encoding an ASCII str."""
    return len(s) if s.isascii() else len(s.encode("utf-8", "surrogatepass"))


_PACKED_OVERHEAD: Final = sys.getsizeof(PackedText(b"", 0, 0, 0)) + sys.getsizeof(b"")
