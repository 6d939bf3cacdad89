"""Framing and validation: every malformed frame becomes a ProtocolError with a clear code."""

from __future__ import annotations

import msgpack
import pytest

from ipc.protocol import (
    E,
    Proposal,
    ProtocolError,
    decode,
    encode,
    field,
    negotiate,
    parse_hello,
    parse_ops,
    parse_snapshot,
)
from ipc.sections import Section, SectionError


def test_roundtrip_and_version() -> None:
    msg = decode(encode({"t": "HELLO", "id": 7, "agent": "a", "budget": 1000}))
    assert msg["v"] == 1 and msg["t"] == "HELLO" and msg["id"] == 7
    hello = parse_hello(msg)
    assert (hello.agent, hello.budget, hello.session, hello.reserve) == ("a", 1000, "default", None)


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (b"\xc1", E.BAD_FRAME),
        (msgpack.packb([1, 2, 3]), E.BAD_FRAME),
        (msgpack.packb({"t": "HELLO"}), E.BAD_VERSION),
        (msgpack.packb({"v": 2, "t": "HELLO"}), E.BAD_VERSION),
        (msgpack.packb({"v": 1}), E.INVALID),
        (msgpack.packb({"v": 1, "t": "X"}) + b"trailing", E.BAD_FRAME),
    ],
)
def test_bad_frames(frame: bytes, code: str) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(frame)
    assert info.value.code == code


def test_size_limit() -> None:
    with pytest.raises(ProtocolError) as info:
        decode(encode({"t": "DELTA", "pad": "x" * 2000}), max_bytes=1024)
    assert info.value.code == E.TOO_LARGE


@pytest.mark.parametrize(
    "hello",
    [
        {"agent": "", "budget": 1000},
        {"agent": "a", "budget": "1000"},
        {"agent": "a", "budget": True},
        {"agent": "a", "budget": 10},
        {"agent": "a", "budget": 1000, "reserve": 1.5},
        {"agent": "a" * 200, "budget": 1000},
    ],
)
def test_hello_validation(hello: dict[str, object]) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_hello({"v": 1, "t": "HELLO", "id": 3, **hello})
    assert info.value.code == E.INVALID and info.value.ref == 3


def test_ops_validation() -> None:
    good = {"t": "DELTA", "ops": [{"op": "append", "sections": [{"id": "s1", "kind": "user", "text": "hi"}]}]}
    assert parse_ops(good, 100)[0].sections[0].id == "s1"
    for ops in (
        [{"op": "explode"}],
        [{"op": "append", "sections": [{"id": "s1", "kind": "bogus", "text": "x"}]}],
        [{"op": "append", "sections": [{"id": "s1", "kind": "user", "text": "x" * 200}]}],
        [
            {
                "op": "append",
                "sections": [
                    {"id": "s1", "kind": "user", "text": "a"},
                    {"id": "s1", "kind": "user", "text": "b"},
                ],
            }
        ],
        [{"op": "remove", "ids": [1, 2]}],
        "nope",
    ):
        with pytest.raises(ProtocolError):
            parse_ops({"t": "DELTA", "ops": ops}, 100)


def test_proposal_wire_roundtrip() -> None:
    d = Section("d1", "digest", "short", tokens=2, meta={"archive": "a1"})
    p = Proposal("p1", 4, ("s1", "s2"), (d,), 100, 2, 50, ("a1",))
    assert Proposal.from_wire(decode(encode(p.to_wire()))) == p


# --- every message survives encode → decode, and the parsers read back what was sent ----------------

SEC = {"id": "s1", "kind": "tool_result", "text": "ok", "tokens": 3, "group": "g1", "meta": {"k": "v"}}
MESSAGES = [
    {"t": "HELLO", "id": 1, "versions": [1], "agent": "a", "budget": 32000, "reserve": 0.2, "tokenizer": "x"},
    {
        "t": "WELCOME",
        "re": 1,
        "version": 1,
        "versions": [1],
        "agent": "a",
        "session": "default",
        "budget": 32000,
        "reserve": 0.2,
        "policy": "auto",
        "high_watermark": 25600,
        "low_watermark": 19200,
        "context_version": 0,
        "max_frame": 16777216,
        "heartbeat_s": 5.0,
        "agent_timeout_s": 120.0,
        "tokenizer": "approx:chars/3",
    },
    {"t": "SNAPSHOT", "id": 2, "version": 4, "sections": [SEC]},
    {"t": "SNAPSHOT", "version": 4, "part": 0, "more": True, "sections": [SEC]},
    {"t": "DELTA", "id": 3, "base": 4, "version": 5, "ops": [{"op": "append", "sections": [SEC]}]},
    {"t": "DELTA", "base": 5, "version": 6, "ops": [{"op": "remove", "ids": ["s1"]}]},
    {"t": "SYNCED", "re": 3, "version": 5, "tokens": 3},
    {"t": "RESYNC", "re": 3, "reason": "gap", "version": 4},
    {"t": "ACK", "proposal": "p1", "version": 7},
    {"t": "NACK", "proposal": "p1", "reason": "stale", "detail": "section s1 is gone"},
    {"t": "RECALL", "id": 4, "refs": ["a1"]},
    {"t": "RECALLED", "re": 4, "items": [{"ref": "a1", "sections": [SEC]}]},
    {"t": "STATUS", "id": 5},
    {"t": "STATE", "re": 5, "daemon": {"agents": 1}, "agents": [{"agent": "a"}]},
    {"t": "HEARTBEAT", "id": 6},
    {"t": "HEARTBEAT", "re": 6, "attached": True},
    {"t": "ERROR", "re": 7, "code": "invalid", "message": "DELTA: field 'ops' is required"},
    {"t": "BYE", "id": 8},
    {"t": "BYE", "reason": "shutdown"},
]


@pytest.mark.parametrize("msg", MESSAGES, ids=[f"{m['t']}-{i}" for i, m in enumerate(MESSAGES)])
def test_every_message_roundtrips(msg: dict[str, object]) -> None:
    frame = encode(dict(msg))
    assert frame[0] & 0xF0 == 0x80 or frame[0] == 0xDE  # one msgpack map (fixmap or map16)
    back = decode(frame)
    assert back == {**msg, "v": 1}
    if msg["t"] == "HELLO":
        h = parse_hello(back)
        assert (h.agent, h.budget, h.reserve, h.tokenizer, h.versions) == ("a", 32000, 0.2, "x", (1,))
    elif msg["t"] == "SNAPSHOT":
        snap = parse_snapshot(back, 1000)
        assert snap.sections[0] == Section.from_wire(SEC, 1000) and snap.version == 4
        assert (snap.part, snap.more) == ((0, True) if "more" in msg else (0, False))
    elif msg["t"] == "DELTA":
        ops = parse_ops(back, 1000)
        assert ops[0].op in ("append", "remove")


def test_section_wire_roundtrip_keeps_every_field() -> None:
    s = Section("s1", "tool_call", "ls", "assistant", 5, "low", True, "g", 1.7e9, {"a": "b"})
    assert Section.from_wire(decode(encode({"t": "X", "s": s.to_wire()}))["s"], 100) == s


# --- limits and negotiation ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad_id", [-1, True, "7", 1 << 60, 1.5])
def test_request_id_must_be_a_small_unsigned_int(bad_id: object) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(msgpack.packb({"v": 1, "t": "STATUS", "id": bad_id}))
    assert info.value.code == E.INVALID and info.value.ref is None


def test_negotiation_picks_the_highest_common_version() -> None:
    assert negotiate((1, 2, 9)) == 1
    with pytest.raises(ProtocolError) as info:
        negotiate((2, 3), ref=4)
    assert info.value.code == E.BAD_VERSION and info.value.ref == 4 and "[1]" in info.value.message
    for versions in ([], ["1"], [True], list(range(1, 40)), "1"):
        with pytest.raises(ProtocolError):
            parse_hello({"v": 1, "t": "HELLO", "agent": "a", "budget": 1000, "versions": versions})
    assert parse_hello({"v": 1, "t": "HELLO", "agent": "a", "budget": 1000}).versions == (1,)


def test_snapshot_parts_are_validated() -> None:
    base = {"v": 1, "t": "SNAPSHOT", "version": 1, "sections": []}
    for bad in ({"part": -1}, {"part": "1"}, {"more": 1}, {"version": -3}, {"sections": {}}):
        with pytest.raises(ProtocolError) as info:
            parse_snapshot({**base, **bad}, 100)
        assert info.value.code == E.INVALID


@pytest.mark.parametrize(
    "section",
    [
        {"id": "s\n1", "kind": "user", "text": "x"},
        {"id": "s1", "kind": "user", "text": "x", "ts": float("nan")},
        {"id": "s1", "kind": "user", "text": "x", "ts": float("inf")},
        {"id": "s1", "kind": "user", "text": "x", "tokens": -1},
        {"id": "s1", "kind": "user", "text": "x", "pinned": 1},
        {"id": "s1", "kind": "user", "text": "x", "meta": {"k": 1}},
    ],
)
def test_bad_sections(section: dict[str, object]) -> None:
    with pytest.raises(SectionError):
        Section.from_wire(section, 100)


def test_ints_are_bounded_and_proposal_archive_is_checked() -> None:
    with pytest.raises(ProtocolError):
        field({"t": "DELTA", "base": 1 << 62}, "base", int)
    d = Section("d1", "digest", "short", tokens=2)
    wire = Proposal("p1", 4, ("s1",), (d,), 100, 2, 50, ("a1",)).to_wire()
    with pytest.raises(ProtocolError):
        Proposal.from_wire({**wire, "archive": [1, 2]})
