"""Wire protocol v1, the base layer: limits, message names, error codes, framing (msgpack) and the
field validators the message parsers (ipc.protocol) are built from.

Every frame is one msgpack map with at least ``v`` (protocol version, int) and ``t`` (message
type, str). Requests may carry ``id`` (int); replies echo it as ``re``. See docs/PROTOCOL.md.
This module has no sockets: both the daemon and the client use it (through ipc.protocol,
which re-exports every name defined here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgpack

from ipc.sections import Section, SectionError

PROTOCOL_VERSION: Final = 1
SUPPORTED_VERSIONS: Final = (1,)
DEFAULT_MAX_FRAME: Final = 16 * 1024 * 1024
MAX_SECTIONS_PER_FRAME: Final = 100_000
MAX_IDS_PER_FRAME: Final = 100_000
MAX_NAME_LEN: Final = 128
MAX_INT: Final = (1 << 53) - 1  # ids, versions and counters: exact in every language's numbers
MAX_VERSIONS_LISTED: Final = 16  # HELLO.versions
MAX_DETAIL_LEN: Final = 1024  # NACK.detail
MAX_SNAPSHOT_SECTIONS: Final = 1_000_000  # all parts of one SNAPSHOT together


class T:
    """Message types."""

    HELLO: Final = "HELLO"
    WELCOME: Final = "WELCOME"
    SNAPSHOT: Final = "SNAPSHOT"
    DELTA: Final = "DELTA"
    SYNCED: Final = "SYNCED"
    RESYNC: Final = "RESYNC"
    PROPOSAL: Final = "PROPOSAL"
    ACK: Final = "ACK"
    NACK: Final = "NACK"
    RECALL: Final = "RECALL"
    RECALLED: Final = "RECALLED"
    STATUS: Final = "STATUS"
    STATE: Final = "STATE"
    HEARTBEAT: Final = "HEARTBEAT"
    ERROR: Final = "ERROR"
    BYE: Final = "BYE"
    CHECKPOINT: Final = "CHECKPOINT"
    RESTORE: Final = "RESTORE"
    CHECKPOINTED: Final = "CHECKPOINTED"  # reply to CHECKPOINT (save, list, show, drop)
    RESTORED: Final = "RESTORED"  # reply to RESTORE
    COMPRESS: Final = "COMPRESS"  # a reader asks for a digest of a large text, archived first
    COMPRESSED: Final = "COMPRESSED"  # reply to COMPRESS


class E:
    """Error codes carried by ERROR frames."""

    BAD_FRAME: Final = "bad_frame"  # not msgpack, not a map, trailing bytes
    TOO_LARGE: Final = "too_large"  # frame over the size limit
    BAD_VERSION: Final = "bad_version"  # unsupported protocol version
    UNKNOWN_TYPE: Final = "unknown_type"
    INVALID: Final = "invalid"  # a field has the wrong type, size or value
    NOT_ATTACHED: Final = "not_attached"  # a request that needs HELLO first
    UNAUTHORIZED: Final = "unauthorized"
    VERSION_MISMATCH: Final = "version_mismatch"  # a delta does not follow the mirror's version
    UNKNOWN_PROPOSAL: Final = "unknown_proposal"
    NOT_FOUND: Final = "not_found"
    LIMIT: Final = "limit"  # a per-agent or global cap is exceeded
    UNAVAILABLE: Final = "unavailable"  # the feature is not available in this daemon
    INTERNAL: Final = "internal"
    EPOCH_CHANGED: Final = "epoch_changed"  # RESTORE refused: the side-effect epoch moved (use force)


NACK_REASONS: Final = frozenset({"stale", "rejected", "failed"})


class ProtocolError(Exception):
    """A frame could not be accepted; becomes an ERROR reply."""

    def __init__(self, code: str, message: str, ref: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.ref = ref


def encode(msg: dict[str, Any]) -> bytes:
    msg.setdefault("v", PROTOCOL_VERSION)
    out: bytes = msgpack.packb(msg, use_bin_type=True)
    return out


def decode(frame: bytes, max_bytes: int = DEFAULT_MAX_FRAME) -> dict[str, Any]:
    """Decode one frame into a map with a valid ``v`` and ``t``; raises ProtocolError."""
    if len(frame) > max_bytes:
        raise ProtocolError(E.TOO_LARGE, f"frame of {len(frame)} bytes exceeds the limit of {max_bytes}")
    try:
        if len(frame) <= MAX_SECTIONS_PER_FRAME:  # msgpack's own limits (the frame's length) are tighter
            obj = msgpack.unpackb(frame, raw=False, strict_map_key=True)
        else:
            obj = msgpack.unpackb(
                frame,
                raw=False,
                strict_map_key=True,
                max_str_len=max_bytes,
                max_bin_len=max_bytes,
                max_array_len=MAX_SECTIONS_PER_FRAME,
                max_map_len=MAX_SECTIONS_PER_FRAME,
            )
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ProtocolError(E.BAD_FRAME, f"frame is not valid msgpack: {type(exc).__name__}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(E.BAD_FRAME, "frame must be a msgpack map")
    ref = obj.get("id")
    if ref is not None and (not isinstance(ref, int) or isinstance(ref, bool) or not 0 <= ref <= MAX_INT):
        raise ProtocolError(E.INVALID, f"field 'id' must be an int in [0, {MAX_INT}]")
    v = obj.get("v")
    if not isinstance(v, int) or isinstance(v, bool):
        raise ProtocolError(E.BAD_VERSION, "field 'v' (protocol version, int) is required", ref)
    if v not in SUPPORTED_VERSIONS:
        raise ProtocolError(
            E.BAD_VERSION, f"protocol version {v} unsupported; supported: {list(SUPPORTED_VERSIONS)}", ref
        )
    t = obj.get("t")
    if not isinstance(t, str):
        raise ProtocolError(E.INVALID, "field 't' (message type, str) is required", ref)
    return obj


# --- field helpers ---------------------------------------------------------------------------------


def field(
    msg: dict[str, Any],
    key: str,
    typ: type,
    *,
    default: Any = ...,
    check: Callable[[Any], bool] | None = None,
    what: str = "",
) -> Any:
    """Fetch ``msg[key]`` checked against ``typ``; missing + no default → INVALID.

    Booleans are not ints; ints are accepted as floats; ints are within ±MAX_INT."""
    val = msg.get(key, _MISSING)
    if val is _MISSING:
        if default is ...:
            raise ProtocolError(E.INVALID, f"{msg.get('t')}: field {key!r} is required", ref_of(msg))
        return default
    vt = type(val)
    if vt is typ:  # decoded msgpack has exact types: the common case
        ok = typ is not int or -MAX_INT <= val <= MAX_INT
    elif typ is float and vt is int:
        val, ok = float(val), -MAX_INT <= val <= MAX_INT
    else:
        ok = isinstance(val, typ) and typ not in (int, float)
    if not ok or (check is not None and not check(val)):
        raise ProtocolError(
            E.INVALID, f"{msg.get('t')}: field {key!r} must be {what or typ.__name__}", ref_of(msg)
        )
    return val


_MISSING: Final = object()


def ref_of(msg: dict[str, Any]) -> int | None:
    """The request id to echo as ``re`` in a reply (decode has checked its type)."""
    ref = msg.get("id")
    return ref if isinstance(ref, int) and not isinstance(ref, bool) else None


def name_ok(s: str) -> bool:
    return 0 < len(s) <= MAX_NAME_LEN and s.isprintable()


def sections_field(msg: dict[str, Any], key: str, max_text: int) -> list[Section]:
    raw = field(msg, key, list, what="a list of sections")
    return section_list(raw, str(msg.get("t")), ref_of(msg), max_text)


def section_list(raw: list[Any], t: str, ref: int | None, max_text: int) -> list[Section]:
    try:
        out = [Section.from_wire(item, max_text) for item in raw]
    except SectionError as exc:
        raise ProtocolError(E.INVALID, f"{t}: {exc}", ref) from None
    if len(out) > 1:
        seen: set[str] = set()
        for sec in out:
            if sec.id in seen:
                raise ProtocolError(E.INVALID, f"{t}: duplicate section id {sec.id!r}", ref)
            seen.add(sec.id)
    return out


def ids_field(msg: dict[str, Any], key: str) -> list[str]:
    raw = field(msg, key, list, what="a list of section ids")
    return id_list(raw, str(msg.get("t")), key, ref_of(msg))


def id_list(raw: list[Any], t: str, key: str, ref: int | None) -> list[str]:
    if len(raw) > MAX_IDS_PER_FRAME or not all(type(i) is str and name_ok(i) for i in raw):
        raise ProtocolError(E.INVALID, f"{t}: {key!r} must be a list of section ids", ref)
    return list(raw)
