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
    return _sections(raw, str(msg.get("t")), ref_of(msg), max_text)


def _sections(raw: list[Any], t: str, ref: int | None, max_text: int) -> list[Section]:
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
    return _ids(raw, str(msg.get("t")), key, ref_of(msg))


def _ids(raw: list[Any], t: str, key: str, ref: int | None) -> list[str]:
    if len(raw) > MAX_IDS_PER_FRAME or not all(type(i) is str and name_ok(i) for i in raw):
        raise ProtocolError(E.INVALID, f"{t}: {key!r} must be a list of section ids", ref)
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
    versions: tuple[int, ...] = (PROTOCOL_VERSION,)  # protocol versions the client speaks
    planner: str | None = (
        None  # requested compaction strategy; the daemon's config decides (watcher.config.settings)
    )
    reader: bool = False  # attach as a reader of the agent's archive only (no context; docs/PROTOCOL.md)


def negotiate(offered: tuple[int, ...], ref: int | None = None) -> int:
    """The highest protocol version both sides speak; BAD_VERSION if there is none."""
    common = set(offered) & set(SUPPORTED_VERSIONS)
    if not common:
        raise ProtocolError(
            E.BAD_VERSION,
            f"no common protocol version: the client speaks {sorted(offered)}, "
            f"this daemon {list(SUPPORTED_VERSIONS)}",
            ref,
        )
    return max(common)


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
        versions=tuple(
            field(
                msg,
                "versions",
                list,
                default=[msg.get("v", PROTOCOL_VERSION)],
                check=lambda vs: (
                    0 < len(vs) <= MAX_VERSIONS_LISTED
                    and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_INT for v in vs)
                ),
                what=f"a list of 1-{MAX_VERSIONS_LISTED} positive ints",
            )
        ),
        planner=field(msg, "planner", str, default=None, check=name_ok, what="a strategy name"),
        reader=field(msg, "reader", bool, default=False),
    )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One SNAPSHOT frame: the whole context at ``version``, or part ``part`` of it if split."""

    version: int
    sections: tuple[Section, ...]
    part: int = 0
    more: bool = False  # further parts follow; the mirror changes when the last one arrives


def parse_snapshot(msg: dict[str, Any], max_text: int) -> Snapshot:
    return Snapshot(
        version=field(msg, "version", int, check=lambda v: v >= 0, what="a non-negative int"),
        sections=tuple(sections_field(msg, "sections", max_text)),
        part=field(msg, "part", int, default=0, check=lambda v: v >= 0, what="a non-negative int"),
        more=field(msg, "more", bool, default=False),
    )


@dataclass(frozen=True, slots=True)
class Op:
    op: str  # append | replace | remove
    sections: tuple[Section, ...] = ()
    ids: tuple[str, ...] = ()


def parse_delta(msg: dict[str, Any], max_text: int) -> tuple[int, int, list[Op]]:
    """A DELTA's ``(base, version, ops)``; ``version`` defaults to ``base + 1``."""
    base: int = field(msg, "base", int, check=_non_negative, what="a non-negative int")
    version: int = field(msg, "version", int, default=base + 1, what="an int")
    return base, version, parse_ops(msg, max_text)


def _non_negative(v: int) -> bool:
    return v >= 0


def parse_ops(msg: dict[str, Any], max_text: int) -> list[Op]:
    raw = field(msg, "ops", list, what="a list of ops")
    ref = ref_of(msg)
    if len(raw) > MAX_SECTIONS_PER_FRAME:
        raise ProtocolError(E.INVALID, "DELTA: too many ops", ref)
    ops: list[Op] = []
    for item in raw:
        if type(item) is not dict:
            raise ProtocolError(E.INVALID, "DELTA: each op must be a map", ref)
        kind = item.get("op")
        if kind in ("append", "replace"):  # a tuple: == comparisons, no hashing of odd values
            secs = item.get("sections")
            if type(secs) is not list:
                raise ProtocolError(E.INVALID, f"DELTA: {kind} needs 'sections', a list of sections", ref)
            ops.append(Op(kind, tuple(_sections(secs, "DELTA", ref, max_text))))
        elif kind == "remove":
            ids = item.get("ids")
            if type(ids) is not list:
                raise ProtocolError(E.INVALID, "DELTA: remove needs 'ids', a list of section ids", ref)
            ops.append(Op("remove", ids=tuple(_ids(ids, "DELTA", "ids", ref))))
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
            archive=tuple(ids_field(msg, "archive") if "archive" in msg else ()),
        )


# --- store requests: RECALL, CHECKPOINT, RESTORE ----------------------------------------------------

MAX_QUERY_LEN: Final = 1000
MAX_PAGE: Final = 10_000
CHECKPOINT_OPS: Final = ("save", "list", "show", "drop")


def _claimed_agent(msg: dict[str, Any]) -> str | None:
    agent: str | None = field(msg, "agent", str, default=None, check=name_ok, what="an agent id")
    return agent


@dataclass(frozen=True, slots=True)
class RecallRequest:
    """Exactly one of ``refs`` (archive references), ``sections`` (section or digest ids) or
    ``query`` (text search in the agent's archive); results are paged by ``offset``/``limit``."""

    refs: tuple[str, ...]
    sections: tuple[str, ...]
    query: str
    session: str | None
    offset: int
    limit: int
    max_bytes: int  # 0 = the daemon's default page size
    agent: str | None  # a claimed owner: refused unless it is the caller's own identity


def parse_recall(msg: dict[str, Any]) -> RecallRequest:
    refs = tuple(ids_field(msg, "refs")) if "refs" in msg else ()
    sections = tuple(ids_field(msg, "sections")) if "sections" in msg else ()
    query = field(
        msg, "query", str, default="", check=lambda q: 0 < len(q) <= MAX_QUERY_LEN, what="1-1000 chars"
    )
    if sum(bool(x) for x in (refs, sections, query)) != 1:
        raise ProtocolError(
            E.INVALID, "RECALL: give exactly one of 'refs', 'sections' or 'query' (non-empty)", ref_of(msg)
        )
    return RecallRequest(
        refs=refs,
        sections=sections,
        query=query,
        session=field(msg, "session", str, default=None, check=name_ok, what="a session name"),
        offset=field(msg, "offset", int, default=0, check=lambda o: o >= 0, what="an int >= 0"),
        limit=field(
            msg, "limit", int, default=0, check=lambda n: 0 <= n <= MAX_PAGE, what="an int in [0, 10000]"
        ),
        max_bytes=field(msg, "max_bytes", int, default=0, check=lambda n: n >= 0, what="an int >= 0"),
        agent=_claimed_agent(msg),
    )


@dataclass(frozen=True, slots=True)
class CheckpointRequest:
    op: str  # save | list | show | drop
    name: str  # "" = the daemon names it (save)
    epoch: int  # the agent's side-effect epoch at save time
    version: int | None  # the context version the agent believes it is saving
    note: str
    overwrite: bool
    sections: bool  # show: include the sections (paged)
    offset: int
    limit: int
    agent: str | None


def parse_checkpoint(msg: dict[str, Any]) -> CheckpointRequest:
    op = field(
        msg, "op", str, default="save", check=lambda o: o in CHECKPOINT_OPS, what="save|list|show|drop"
    )
    name = field(msg, "name", str, default="", check=lambda n: n == "" or name_ok(n), what="1-128 chars")
    if op in ("show", "drop") and not name:
        raise ProtocolError(E.INVALID, f"CHECKPOINT {op}: field 'name' is required", ref_of(msg))
    return CheckpointRequest(
        op=op,
        name=name,
        epoch=field(msg, "epoch", int, default=0, check=lambda e: e >= 0, what="an int >= 0"),
        version=field(msg, "version", int, default=None, check=lambda v: v >= 0, what="an int >= 0"),
        note=field(msg, "note", str, default="", check=lambda n: len(n) <= 4096, what="at most 4096 chars"),
        overwrite=field(msg, "overwrite", bool, default=False),
        sections=field(msg, "sections", bool, default=False),
        offset=field(msg, "offset", int, default=0, check=lambda o: o >= 0, what="an int >= 0"),
        limit=field(
            msg, "limit", int, default=0, check=lambda n: 0 <= n <= MAX_PAGE, what="an int in [0, 10000]"
        ),
        agent=_claimed_agent(msg),
    )


@dataclass(frozen=True, slots=True)
class RestoreRequest:
    name: str
    epoch: int  # the agent's side-effect epoch now
    force: bool  # restore even though the epoch changed
    version: int | None  # the agent's context version now
    agent: str | None


def parse_restore(msg: dict[str, Any]) -> RestoreRequest:
    return RestoreRequest(
        name=field(msg, "name", str, check=name_ok, what="a checkpoint name"),
        epoch=field(msg, "epoch", int, check=lambda e: e >= 0, what="an int >= 0"),
        force=field(msg, "force", bool, default=False),
        version=field(msg, "version", int, default=None, check=lambda v: v >= 0, what="an int >= 0"),
        agent=_claimed_agent(msg),
    )


@dataclass(frozen=True, slots=True)
class CompressRequest:
    """COMPRESS: archive ``text`` (e.g. a large tool output) and answer with its digest."""

    text: str
    label: str  # what produced it (a tool name), kept with the archived original
    min_tokens: int  # a text with fewer tokens comes back as it is (0 = the daemon's default)
    target_tokens: int  # the digest's size goal (0 = the daemon's default)


def parse_compress(msg: dict[str, Any], max_text: int) -> CompressRequest:
    return CompressRequest(
        text=field(msg, "text", str, check=lambda t: 0 < len(t) <= max_text, what="a non-empty string"),
        label=field(
            msg, "label", str, default="", check=lambda s: len(s) <= MAX_NAME_LEN, what="a short string"
        ),
        min_tokens=field(msg, "min_tokens", int, default=0, check=lambda n: n >= 0, what="an int >= 0"),
        target_tokens=field(
            msg, "target_tokens", int, default=0, check=lambda n: n == 0 or n >= 16, what="0 or an int >= 16"
        ),
    )
