"""Wire protocol v1: message names, error codes, framing and validation.

Every frame is one msgpack map with at least ``v`` (protocol version, int) and ``t`` (message
type, str). Requests may carry ``id`` (int); replies echo it as ``re``. See docs/PROTOCOL.md.
This module has no sockets: both the daemon and the client use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from ipc.sections import Section, SectionError

PROTOCOL_VERSION: Final = 1
SUPPORTED_VERSIONS: Final = (1,)
DEFAULT_MAX_FRAME: Final = 16 * 1024 * 1024
MAX_SECTIONS_PER_FRAME: Final = 100_000
MAX_IDS_PER_FRAME: Final = 100_000
MAX_NAME_LEN: Final = 128


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
    ref = ref if isinstance(ref, int) and not isinstance(ref, bool) else None
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
    """Fetch ``msg[key]`` checked against ``typ``; missing + no default → INVALID."""
    ref = msg.get("id") if isinstance(msg.get("id"), int) else None
    if key not in msg:
        if default is ...:
            raise ProtocolError(E.INVALID, f"{msg.get('t')}: field {key!r} is required", ref)
        return default
    val = msg[key]
    ok = isinstance(val, typ) and not (typ in (int, float) and isinstance(val, bool))
    if typ is float and isinstance(val, int) and not isinstance(val, bool):
        val, ok = float(val), True
    if not ok or (check is not None and not check(val)):
        raise ProtocolError(E.INVALID, f"{msg.get('t')}: field {key!r} must be {what or typ.__name__}", ref)
    return val


def name_ok(s: str) -> bool:
    return 0 < len(s) <= MAX_NAME_LEN and s.isprintable()


def sections_field(msg: dict[str, Any], key: str, max_text: int) -> list[Section]:
    raw = field(msg, key, list, what="a list of sections")
    ref = msg.get("id") if isinstance(msg.get("id"), int) else None
    out: list[Section] = []
    seen: set[str] = set()
    for item in raw:
        try:
            sec = Section.from_wire(item, max_text)
        except SectionError as exc:
            raise ProtocolError(E.INVALID, f"{msg.get('t')}: {exc}", ref) from None
        if sec.id in seen:
            raise ProtocolError(E.INVALID, f"{msg.get('t')}: duplicate section id {sec.id!r}", ref)
        seen.add(sec.id)
        out.append(sec)
    return out


def ids_field(msg: dict[str, Any], key: str) -> list[str]:
    raw = field(msg, key, list, what="a list of section ids")
    if len(raw) > MAX_IDS_PER_FRAME or not all(isinstance(i, str) and name_ok(i) for i in raw):
        raise ProtocolError(
            E.INVALID, f"{msg.get('t')}: {key!r} must be a list of section ids", msg.get("id")
        )
    return list(raw)


# --- parsed client requests ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hello:
    agent: str
    session: str
    budget: int
    reserve: float | None
    token: str
    tokenizer: str
    policy: str | None
    resume: bool  # the client keeps its context and will resync (e.g. after a daemon restart)


def parse_hello(msg: dict[str, Any]) -> Hello:
    reserve = field(
        msg, "reserve", float, default=None, check=lambda r: 0.0 < r < 1.0, what="a number in (0, 1)"
    )
    policy = field(
        msg,
        "policy",
        str,
        default=None,
        check=lambda p: p in ("auto", "manual", "off"),
        what="one of auto, manual, off",
    )
    return Hello(
        agent=field(msg, "agent", str, check=name_ok, what="a printable string of 1-128 chars"),
        session=field(
            msg, "session", str, default="default", check=name_ok, what="a printable string of 1-128 chars"
        ),
        budget=field(
            msg, "budget", int, check=lambda b: 256 <= b <= 100_000_000, what="an int in [256, 1e8]"
        ),
        reserve=reserve,
        token=field(msg, "token", str, default="", check=lambda s: len(s) <= 512, what="a string"),
        tokenizer=field(msg, "tokenizer", str, default="", check=lambda s: len(s) <= 128, what="a string"),
        policy=policy,
        resume=field(msg, "resume", bool, default=False),
    )


@dataclass(frozen=True, slots=True)
class Op:
    op: str  # append | replace | remove
    sections: tuple[Section, ...] = ()
    ids: tuple[str, ...] = ()


def parse_ops(msg: dict[str, Any], max_text: int) -> list[Op]:
    raw = field(msg, "ops", list, what="a list of ops")
    ref = msg.get("id") if isinstance(msg.get("id"), int) else None
    if len(raw) > MAX_SECTIONS_PER_FRAME:
        raise ProtocolError(E.INVALID, "DELTA: too many ops", ref)
    ops: list[Op] = []
    for item in raw:
        if not isinstance(item, dict):
            raise ProtocolError(E.INVALID, "DELTA: each op must be a map", ref)
        kind = item.get("op")
        sub = {**item, "t": "DELTA", "id": ref}
        if kind == "append":
            ops.append(Op("append", tuple(sections_field(sub, "sections", max_text))))
        elif kind == "replace":
            ops.append(Op("replace", tuple(sections_field(sub, "sections", max_text))))
        elif kind == "remove":
            ops.append(Op("remove", ids=tuple(ids_field(sub, "ids"))))
        else:
            raise ProtocolError(E.INVALID, f"DELTA: unknown op {kind!r} (append, replace, remove)", ref)
    return ops


# --- messages a client receives ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Proposal:
    """A compaction the daemon offers: replace ``replaces`` (contiguous, in order) by ``digest``."""

    proposal: str
    base: int
    replaces: tuple[str, ...]
    digest: tuple[Section, ...]
    tokens_before: int
    tokens_after: int
    invalidated_prefix_tokens: int
    archive: tuple[str, ...]

    def to_wire(self) -> dict[str, Any]:
        return {
            "t": T.PROPOSAL,
            "proposal": self.proposal,
            "base": self.base,
            "replaces": list(self.replaces),
            "digest": [s.to_wire() for s in self.digest],
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "invalidated_prefix_tokens": self.invalidated_prefix_tokens,
            "archive": list(self.archive),
        }

    @classmethod
    def from_wire(cls, msg: dict[str, Any], max_text: int = DEFAULT_MAX_FRAME) -> Proposal:
        return cls(
            proposal=field(msg, "proposal", str, check=name_ok),
            base=field(msg, "base", int),
            replaces=tuple(ids_field(msg, "replaces")),
            digest=tuple(sections_field(msg, "digest", max_text)),
            tokens_before=field(msg, "tokens_before", int),
            tokens_after=field(msg, "tokens_after", int),
            invalidated_prefix_tokens=field(msg, "invalidated_prefix_tokens", int, default=0),
            archive=tuple(field(msg, "archive", list, default=[])),
        )
