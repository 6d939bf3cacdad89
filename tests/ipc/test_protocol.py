"""Framing and validation: every malformed frame becomes a ProtocolError with a clear code."""

from __future__ import annotations

import msgpack
import pytest

from ipc.protocol import E, Proposal, ProtocolError, decode, encode, parse_hello, parse_ops
from ipc.sections import Section


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
