"""Wire protocol v1: message names, error codes, framing and validation.

Every frame is one msgpack map with at least ``v`` (protocol version, int) and ``t`` (message
type, str). Requests may carry ``id`` (int); replies echo it as ``re``. See docs/PROTOCOL.md.
This module has no sockets: both the daemon and the client use it. The base layer (limits, names,
codes, framing, field validators) is ipc.wire; its names are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from ipc.sections import Section
from ipc.wire import (
    DEFAULT_MAX_FRAME,
    MAX_DETAIL_LEN,
    MAX_IDS_PER_FRAME,
    MAX_INT,
    MAX_NAME_LEN,
    MAX_SECTIONS_PER_FRAME,
    MAX_SNAPSHOT_SECTIONS,
    MAX_VERSIONS_LISTED,
    NACK_REASONS,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    E,
    ProtocolError,
    T,
    decode,
    encode,
    field,
    id_list,
    ids_field,
    name_ok,
    ref_of,
    section_list,
    sections_field,
)

__all__ = [
    "DEFAULT_MAX_FRAME",
    "MAX_DETAIL_LEN",
    "MAX_IDS_PER_FRAME",
    "MAX_INT",
    "MAX_NAME_LEN",
    "MAX_SECTIONS_PER_FRAME",
    "MAX_SNAPSHOT_SECTIONS",
    "MAX_VERSIONS_LISTED",
    "NACK_REASONS",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "E",
    "ProtocolError",
    "T",
    "decode",
    "encode",
    "field",
    "ids_field",
    "name_ok",
    "ref_of",
    "sections_field",
]


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
            ops.append(Op(kind, tuple(section_list(secs, "DELTA", ref, max_text))))
        elif kind == "remove":
            ids = item.get("ids")
            if type(ids) is not list:
                raise ProtocolError(E.INVALID, "DELTA: remove needs 'ids', a list of section ids", ref)
            ops.append(Op("remove", ids=tuple(id_list(ids, "DELTA", "ids", ref))))
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
