"""The ingest hot path: DELTA frames decoded and validated in one typed msgspec pass, and SYNCED
replies encoded without building a dict.

The reference validator is ipc.protocol (``decode`` + ``parse_ops`` + ``Section.from_wire``): it
defines what is valid and which ERROR an invalid frame gets. :func:`decode_delta` accepts only a
subset of what it accepts, with the same values: a DELTA with exactly the known fields, each within
the reference's limits (as msgspec constraints, plus the checks msgspec cannot express: printable
ids, duplicate ids in one op). Anything else (another message type, an unknown field, any invalid
value, a frame over ``FAST_MAX_FRAME`` bytes) returns None, and the caller takes the reference path,
which accepts it or answers the exact ERROR it always did. tests/watcher/serve/test_wire.py checks both
paths against each other on valid and invalid frames.

Daemon side only: msgspec is a dependency of the daemon, not of the client package (ipc).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Annotated, Final, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from ipc.protocol import (
    MAX_INT,
    MAX_NAME_LEN,
    MAX_SECTIONS_PER_FRAME,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Op,
    T,
)
from ipc.sections import MAX_ID_LEN, MAX_META_ITEMS, MAX_META_VALUE, MAX_TOKENS, MAX_TS, Section

# Up to this size msgpack's own limits in ipc.protocol.decode are the frame's length, which no
# list or map of a valid frame can reach; above it the reference decoder caps array and map
# lengths, which the fast path does not model: such frames take the reference path.
FAST_MAX_FRAME: Final = MAX_SECTIONS_PER_FRAME

Kind = Literal["system", "user", "assistant", "tool_call", "tool_result", "digest", "other"]  # sections.KINDS
Priority = Literal["critical", "high", "medium", "low"]  # sections.PRIORITIES
SectionId = Annotated[str, Meta(min_length=1, max_length=MAX_ID_LEN)]  # and printable (checked after)
Short = Annotated[str, Meta(max_length=MAX_ID_LEN)]
Meta_ = Annotated[
    dict[Annotated[str, Meta(max_length=MAX_ID_LEN)], Annotated[str, Meta(max_length=MAX_META_VALUE)]],
    Meta(max_length=MAX_META_ITEMS),
]


class WireSection(Struct, forbid_unknown_fields=True, gc=False):
    id: SectionId
    kind: Kind
    text: str  # at most max_frame chars: never longer than the frame
    role: Short = ""
    tokens: Annotated[int, Meta(ge=0, le=MAX_TOKENS)] = 0
    priority: Priority = "medium"
    pinned: bool = False
    group: Short = ""
    ts: Annotated[float, Meta(ge=0, lt=MAX_TS)] = 0.0  # an int is accepted, as a float
    meta: Meta_ | UnsetType = UNSET


class WireAppend(Struct, tag_field="op", tag="append", forbid_unknown_fields=True, gc=False):
    sections: list[WireSection]


class WireReplace(Struct, tag_field="op", tag="replace", forbid_unknown_fields=True, gc=False):
    sections: list[WireSection]


# section ids to remove: at most MAX_NAME_LEN chars, printable (checked after)
RemoveId = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_LEN)]


class WireRemove(Struct, tag_field="op", tag="remove", forbid_unknown_fields=True, gc=False):
    ids: list[RemoveId]


class WireDelta(Struct, forbid_unknown_fields=True):
    v: int  # in SUPPORTED_VERSIONS (checked after)
    t: Literal["DELTA"]
    base: Annotated[int, Meta(ge=0, le=MAX_INT)]
    ops: list[WireAppend | WireReplace | WireRemove]
    id: Annotated[int, Meta(ge=0, le=MAX_INT)] | None = None  # nil: no id (as in ipc.protocol.decode)
    version: Annotated[int, Meta(ge=-MAX_INT, le=MAX_INT)] | UnsetType = UNSET  # default base + 1


_decoder: Final = msgspec.msgpack.Decoder(WireDelta)

# --- building Sections and Ops -----------------------------------------------------------------------
# Section and Op are frozen slots dataclasses, whose generated __init__ sets each field through
# object.__setattr__ (to get around the frozen check): for a Section that is half the cost of its
# whole DELTA's decoding. Here the slots are set directly, which builds the same object. Only while
# the classes have exactly these fields and no __post_init__: else their own constructor is used
# (a field added later would otherwise be left unset).

_SECTION_FIELDS: Final = ("id", "kind", "text", "role", "tokens", "priority", "pinned", "group", "ts", "meta")
_OP_FIELDS: Final = ("op", "sections", "ids")
_new: Final = object.__new__


def _slot_setters(cls: type, names: tuple[str, ...]) -> list[Callable[[object, object], None]] | None:
    fields = tuple(f.name for f in dataclasses.fields(cls))
    if fields != names or hasattr(cls, "__post_init__") or getattr(cls, "__slots__", None) != names:
        return None
    return [cls.__dict__[name].__set__ for name in names]


def _make_section() -> Callable[[str, str, str, str, int, str, bool, str, float, dict[str, str]], Section]:
    setters = _slot_setters(Section, _SECTION_FIELDS)
    if setters is None:
        return Section
    s_id, s_kind, s_text, s_role, s_tokens, s_priority, s_pinned, s_group, s_ts, s_meta = setters

    def section(
        id: str,
        kind: str,
        text: str,
        role: str,
        tokens: int,
        priority: str,
        pinned: bool,
        group: str,
        ts: float,
        meta: dict[str, str],
    ) -> Section:
        sec: Section = _new(Section)
        s_id(sec, id)
        s_kind(sec, kind)
        s_text(sec, text)
        s_role(sec, role)
        s_tokens(sec, tokens)
        s_priority(sec, priority)
        s_pinned(sec, pinned)
        s_group(sec, group)
        s_ts(sec, ts)
        s_meta(sec, meta)
        return sec

    return section


def _make_op() -> Callable[[str, tuple[Section, ...], tuple[str, ...]], Op]:
    setters = _slot_setters(Op, _OP_FIELDS)
    if setters is None:
        return Op
    o_op, o_sections, o_ids = setters

    def op(kind: str, sections: tuple[Section, ...], ids: tuple[str, ...]) -> Op:
        out: Op = _new(Op)
        o_op(out, kind)
        o_sections(out, sections)
        o_ids(out, ids)
        return out

    return op


_section: Final = _make_section()
_op: Final = _make_op()

# Small strings every section repeats, held once (30 000 mirrored sections at 800 agents: ~3.5 MB
# of copies). A role is one of a handful ("user", "assistant", "tool", ...): each is kept at its
# first sight, up to MAX_ROLES (a client sending a new role per section fills no table). A section
# without meta gets the one shared empty dict: nothing mutates a section's meta (Section is frozen).
MAX_ROLES: Final = 256
_roles: dict[str, str] = {}
_NO_META: Final[dict[str, str]] = {}


def _role(role: str) -> str:
    kept = _roles.get(role)
    if kept is not None:
        return kept
    if len(_roles) < MAX_ROLES:
        _roles[role] = role
    return role


# A valid DELTA as the reference path would have parsed it: (ref, base, version, ops), ``ref``
# being its request id (``id``) to echo as ``re`` (a plain tuple: a NamedTuple costs more to build)
Delta = tuple[int | None, int, int, list[Op]]


def decode_delta(frame: bytes, max_frame: int) -> Delta | None:
    """The DELTA in ``frame`` if the fast path can prove it valid, else None (take the reference
    path: the frame may still be valid, or be answered with an ERROR).

    ``max_frame`` is the daemon's frame limit, which is also its limit on a section's text (as
    in the reference path): a text is never longer in chars than the frame is in bytes."""
    size = len(frame)
    if size > FAST_MAX_FRAME or size > max_frame:
        return None
    try:
        msg = _decoder.decode(frame)
    except Exception:  # msgspec.DecodeError (ValidationError is one), UnicodeDecodeError, ...
        return None
    if msg.v not in SUPPORTED_VERSIONS:
        return None
    ops: list[Op] = []
    for op in msg.ops:
        if isinstance(op, WireRemove):
            for sid in op.ids:
                if not sid.isprintable():
                    return None
            ops.append(_op("remove", (), tuple(op.ids)))
            continue
        out: list[Section] = []
        for s in op.sections:
            meta = s.meta
            if not s.id.isprintable():
                return None
            out.append(
                _section(
                    s.id,
                    s.kind,
                    s.text,
                    _role(s.role),
                    s.tokens,
                    s.priority,
                    s.pinned,
                    s.group,
                    s.ts,
                    _NO_META if meta is UNSET else meta,
                )
            )
        if len(out) > 1 and len({s.id for s in out}) != len(out):
            return None  # duplicate ids in one op: the reference path names the first
        ops.append(_op("append" if type(op) is WireAppend else "replace", tuple(out), ()))
    version = msg.version
    return msg.id, msg.base, msg.base + 1 if version is UNSET else version, ops


# --- SYNCED -----------------------------------------------------------------------------------------


class _Synced(Struct, gc=False):
    """SYNCED as ipc.protocol.encode writes it: these keys in this order (``v`` last)."""

    t: str
    re: int
    version: int
    tokens: int
    v: int


_encode: Final = msgspec.msgpack.Encoder().encode


def synced(ref: int, version: int, tokens: int) -> bytes:
    """``encode({"t": "SYNCED", "re": ref, "version": version, "tokens": tokens})``, byte for byte."""
    return _encode(_Synced(T.SYNCED, ref, version, tokens, PROTOCOL_VERSION))
