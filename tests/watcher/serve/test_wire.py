"""watcher.serve.wire, the ingest fast path, against the reference validator (ipc.protocol): every frame
the fast path accepts, the reference accepts with the same values (types included); every frame it
declines goes to the reference path, which accepts it or answers the ERROR it always did. Checked
on listed frames, on generated ones (hypothesis), and end to end against a real daemon, whose
replies must be byte for byte what the reference path would send."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any, get_args

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipc.protocol import (
    MAX_INT,
    E,
    ProtocolError,
    T,
    decode,
    encode,
    parse_delta,
    ref_of,
)
from ipc.sections import KINDS, MAX_TOKENS, MAX_TS, PRIORITIES, Section
from watcher.eval.bench.ingest import DeltaStream
from watcher.eval.harness import DaemonProcess
from watcher.serve import wire

MAX = 1 << 20


def reference(frame: bytes, max_frame: int = MAX) -> tuple[Any, ...]:
    """What the reference path makes of a frame from an attached agent: ("delta", ref, base,
    version, ops), ("other", type), or ("error", code, message, ref)."""
    try:
        msg = decode(frame, max_frame)
        if msg["t"] != T.DELTA:
            return ("other", msg["t"])
        base, version, ops = parse_delta(msg, max_frame)
    except ProtocolError as exc:
        return ("error", exc.code, exc.message, exc.ref)
    return ("delta", ref_of(msg), base, version, ops)


def agree(frame: bytes, max_frame: int = MAX) -> tuple[wire.Delta | None, tuple[Any, ...]]:
    """The fast path's answer, checked against the reference's (which is returned too)."""
    fast = wire.decode_delta(frame, max_frame)
    ref = reference(frame, max_frame)
    if fast is not None:
        assert ref[0] == "delta", (ref, fast)
        # repr: the same values and the same types (1 is not 1.0, True is not 1)
        assert repr(fast) == repr(ref[1:])
    return fast, ref


def delta(ops: list[Any], **top: Any) -> dict[str, Any]:
    return {"v": 1, "t": "DELTA", "base": 7, "ops": ops} | top


def sec(**kw: Any) -> dict[str, Any]:
    return {"id": "s1", "kind": "tool_result", "text": "hello"} | kw


def append(*sections: dict[str, Any]) -> dict[str, Any]:
    return {"op": "append", "sections": list(sections)}


def pack(msg: Any) -> bytes:
    out: bytes = msgpack.packb(msg, use_bin_type=True)
    return out


def raw_map(*pairs: tuple[Any, bytes]) -> bytes:
    """A msgpack map from (key, packed value) pairs, repeated keys allowed."""
    return bytes([0x80 | len(pairs)]) + b"".join(pack(k) + v for k, v in pairs)


FLOAT32_SECTION = raw_map(
    ("id", pack("f")), ("kind", pack("user")), ("text", pack("t")), ("ts", b"\xca\x3f\x80\x00\x00")
)

VALID = {
    "bench frame": DeltaStream().next_frame(),
    "empty": pack(delta([])),
    "id, version": pack(delta([append(sec())], id=3, version=8)),
    "id nil": pack(delta([append(sec())], id=None)),
    "id 0, bounds": pack(delta([], id=0, base=MAX_INT, version=-MAX_INT)),
    "id max": pack(delta([], id=MAX_INT, base=0, version=MAX_INT)),
    "every section field": pack(
        delta(
            [
                append(
                    sec(
                        role="tool",
                        tokens=MAX_TOKENS,
                        priority="high",
                        pinned=True,
                        group="g1",
                        ts=1_700_000_000.25,
                        meta={"path": "a.py", "k" * 128: "v" * 4096},
                    )
                )
            ]
        )
    ),
    "ts as int": pack(delta([append(sec(ts=5))])),
    "ts zero, below max": pack(delta([append(sec(ts=0), sec(id="s2", ts=MAX_TS - 1))])),
    "meta empty": pack(delta([append(sec(meta={}))])),
    "defaults given": pack(
        delta([append(sec(role="", tokens=0, priority="medium", pinned=False, group=""))])
    ),
    "every kind": pack(delta([append(*(sec(id=k, kind=k) for k in sorted(KINDS)))])),
    "every priority": pack(delta([append(*(sec(id=p, priority=p) for p in PRIORITIES))])),
    "unicode": pack(delta([append(sec(id="é😀" * 64, text="naïve — ✓ " * 50, group="ß" * 128))])),
    "replace and remove": pack(
        delta(
            [
                {"op": "replace", "sections": [sec(id="a"), sec(id="b")]},
                {"op": "remove", "ids": ["c", "d" * 128, "é"]},
                append(),
                {"op": "remove", "ids": []},
            ]
        )
    ),
    "same id in two ops": pack(delta([append(sec()), append(sec())])),  # the mirror decides
    "remove twice": pack(delta([{"op": "remove", "ids": ["a", "a"]}])),
    "keys in another order": raw_map(
        ("ops", pack([{"sections": [{"text": "x", "kind": "user", "id": "z"}], "op": "append"}])),
        ("base", pack(1)),
        ("t", pack("DELTA")),
        ("v", pack(1)),
    ),
    "repeated key: the last wins": raw_map(
        ("v", pack(1)), ("t", pack("DELTA")), ("base", pack(3)), ("base", pack(4)), ("ops", pack([]))
    ),
    "non-minimal encodings": raw_map(
        ("v", b"\xcd\x00\x01"),
        ("t", b"\xd9\x05DELTA"),
        ("base", b"\xcf" + (9).to_bytes(8, "big")),
        ("ops", b"\xdc\x00\x00"),
    ),
    "float32 ts": raw_map(
        ("v", pack(1)),
        ("t", pack("DELTA")),
        ("base", pack(0)),
        ("ops", b"\x91" + raw_map(("op", pack("append")), ("sections", b"\x91" + FLOAT32_SECTION))),
    ),
}

# valid, but outside the fast path: the reference path takes them, as before
DECLINED_VALID = {
    "repeated key, the first invalid": raw_map(
        ("v", pack(1)), ("t", pack("DELTA")), ("base", pack(-1)), ("base", pack(4)), ("ops", pack([]))
    ),
    "unknown top-level field": pack(delta([], extra={"any": [1, 2]})),
    "unknown section field": pack(delta([append(sec(colour="red"))])),
    "unknown op field": pack(delta([{"op": "append", "sections": [], "ids": [1]}])),
    "over the fast path's size": pack(delta([append(sec(text="x" * (wire.FAST_MAX_FRAME + 1)))])),
}

INVALID: dict[str, tuple[bytes, str]] = {
    "not msgpack": (b"\xc1", E.BAD_FRAME),
    "not a map": (pack([1, 2]), E.BAD_FRAME),
    "trailing bytes": (pack(delta([])) + b"\x00", E.BAD_FRAME),
    "bad utf-8": (pack(delta([append(sec())])).replace(b"hello", b"hell\xff"), E.BAD_FRAME),
    "surrogate": (pack(delta([append(sec())])).replace(b"hello", b"he\xed\xa0\x80"), E.BAD_FRAME),
    "int key in meta": (pack(delta([append(sec(meta={1: "x"}))])), E.BAD_FRAME),
    "no v": (pack({"t": "DELTA", "base": 1, "ops": []}), E.BAD_VERSION),
    "v 2": (pack(delta([], v=2)), E.BAD_VERSION),
    "v true": (pack(delta([], v=True)), E.BAD_VERSION),
    "id -1": (pack(delta([], id=-1)), E.INVALID),
    "id str": (pack(delta([], id="1")), E.INVALID),
    "id too big": (pack(delta([], id=MAX_INT + 1)), E.INVALID),
    "id true": (pack(delta([], id=True)), E.INVALID),
    "no t": (pack({"v": 1, "base": 1, "ops": []}), E.INVALID),
    "t bytes": (pack(delta([], t=b"DELTA")), E.INVALID),
    "no base": (pack({"v": 1, "t": "DELTA", "ops": []}), E.INVALID),
    "base -1": (pack(delta([], base=-1)), E.INVALID),
    "base nil": (pack(delta([], base=None)), E.INVALID),
    "base float": (pack(delta([], base=1.0)), E.INVALID),
    "base true": (pack(delta([], base=True)), E.INVALID),
    "base too big": (pack(delta([], base=MAX_INT + 1)), E.INVALID),
    "version nil": (pack(delta([], version=None)), E.INVALID),
    "version str": (pack(delta([], version="8")), E.INVALID),
    "version too small": (pack(delta([], version=-MAX_INT - 1)), E.INVALID),
    "no ops": (pack({"v": 1, "t": "DELTA", "base": 1}), E.INVALID),
    "ops a map": (pack(delta({})), E.INVALID),  # type: ignore[arg-type]
    "op not a map": (pack(delta(["append"])), E.INVALID),
    "op unknown": (pack(delta([{"op": "insert", "sections": []}])), E.INVALID),
    "op missing": (pack(delta([{"sections": []}])), E.INVALID),
    "op not a str": (pack(delta([{"op": 1, "sections": []}])), E.INVALID),
    "append without sections": (pack(delta([{"op": "append"}])), E.INVALID),
    "sections a map": (pack(delta([{"op": "append", "sections": {}}])), E.INVALID),
    "remove without ids": (pack(delta([{"op": "remove", "sections": []}])), E.INVALID),
    "ids not strings": (pack(delta([{"op": "remove", "ids": [1]}])), E.INVALID),
    "empty id to remove": (pack(delta([{"op": "remove", "ids": [""]}])), E.INVALID),
    "long id to remove": (pack(delta([{"op": "remove", "ids": ["x" * 129]}])), E.INVALID),
    "unprintable id to remove": (pack(delta([{"op": "remove", "ids": ["a\n"]}])), E.INVALID),
    "section not a map": (pack(delta([append("s1")])), E.INVALID),  # type: ignore[arg-type]
    "no id": (pack(delta([append({"kind": "user", "text": "x"})])), E.INVALID),
    "empty id": (pack(delta([append(sec(id=""))])), E.INVALID),
    "long id": (pack(delta([append(sec(id="x" * 129))])), E.INVALID),
    "unprintable id": (pack(delta([append(sec(id="a\x00"))])), E.INVALID),
    "bad kind": (pack(delta([append(sec(kind="note"))])), E.INVALID),
    "no kind": (pack(delta([append({"id": "a", "text": "x"})])), E.INVALID),
    "no text": (pack(delta([append({"id": "a", "kind": "user"})])), E.INVALID),
    "text bytes": (pack(delta([append(sec(text=b"x"))])), E.INVALID),
    "role int": (pack(delta([append(sec(role=1))])), E.INVALID),
    "role nil": (pack(delta([append(sec(role=None))])), E.INVALID),
    "long role": (pack(delta([append(sec(role="r" * 129))])), E.INVALID),
    "tokens -1": (pack(delta([append(sec(tokens=-1))])), E.INVALID),
    "tokens too many": (pack(delta([append(sec(tokens=MAX_TOKENS + 1))])), E.INVALID),
    "tokens true": (pack(delta([append(sec(tokens=True))])), E.INVALID),
    "tokens float": (pack(delta([append(sec(tokens=5.0))])), E.INVALID),
    "bad priority": (pack(delta([append(sec(priority="urgent"))])), E.INVALID),
    "pinned 1": (pack(delta([append(sec(pinned=1))])), E.INVALID),
    "long group": (pack(delta([append(sec(group="g" * 129))])), E.INVALID),
    "ts -1": (pack(delta([append(sec(ts=-1))])), E.INVALID),
    "ts too late": (pack(delta([append(sec(ts=MAX_TS))])), E.INVALID),
    "ts nan": (pack(delta([append(sec(ts=math.nan))])), E.INVALID),
    "ts inf": (pack(delta([append(sec(ts=math.inf))])), E.INVALID),
    "ts true": (pack(delta([append(sec(ts=True))])), E.INVALID),
    "ts str": (pack(delta([append(sec(ts="1"))])), E.INVALID),
    "meta a list": (pack(delta([append(sec(meta=["a"]))])), E.INVALID),
    "meta too many": (pack(delta([append(sec(meta={str(i): "v" for i in range(33)}))])), E.INVALID),
    "meta long key": (pack(delta([append(sec(meta={"k" * 129: "v"}))])), E.INVALID),
    "meta long value": (pack(delta([append(sec(meta={"k": "v" * 4097}))])), E.INVALID),
    "meta int value": (pack(delta([append(sec(meta={"k": 1}))])), E.INVALID),
    "meta bytes key": (pack(delta([append(sec(meta={b"k": "v"}))])), E.INVALID),
    "duplicate ids in one op": (pack(delta([append(sec(), sec(text="again"))])), E.INVALID),
    "duplicate ids in replace": (pack(delta([{"op": "replace", "sections": [sec(), sec()]}])), E.INVALID),
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_the_fast_path_takes_valid_deltas_with_the_reference_values(name: str) -> None:
    fast, ref = agree(VALID[name])
    assert fast is not None, ref


@pytest.mark.parametrize("name", sorted(DECLINED_VALID))
def test_valid_frames_outside_the_fast_path_go_to_the_reference(name: str) -> None:
    fast, ref = agree(DECLINED_VALID[name])
    assert fast is None and ref[0] == "delta"


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_frames_go_to_the_reference_which_answers_the_error(name: str) -> None:
    frame, code = INVALID[name]
    fast, ref = agree(frame)
    assert fast is None
    assert ref[:2] == ("error", code), ref


def test_frame_limits_and_other_types_go_to_the_reference() -> None:
    frame = pack(delta([append(sec(text="x" * 2000))]))
    assert agree(frame, max_frame=len(frame))[0] is not None
    fast, ref = agree(frame, max_frame=len(frame) - 1)
    assert fast is None and ref[:2] == ("error", E.TOO_LARGE)
    for msg in ({"v": 1, "t": T.HEARTBEAT}, {"v": 1, "t": T.ACK, "proposal": "p", "version": 2}):
        fast, ref = agree(pack(msg))
        assert fast is None and ref[0] == "other"


def test_the_schema_names_the_same_kinds_and_priorities() -> None:
    assert set(get_args(wire.Kind)) == KINDS
    assert get_args(wire.Priority) == PRIORITIES


def test_fast_sections_and_ops_are_the_classes_own() -> None:
    """The slot-setting constructors are in use, and build what the constructors would."""
    assert wire._section is not Section  # fields as expected: the fast constructor is active
    built = wire._section("a", "user", "t", "r", 3, "low", True, "g", 1.5, {"k": "v"})
    assert type(built) is Section
    assert built == Section("a", "user", "t", "r", 3, "low", True, "g", 1.5, {"k": "v"})
    assert built.with_tokens(4).tokens == 4 and built.to_wire()["meta"] == {"k": "v"}
    op = wire._op("remove", (), ("a",))
    assert repr(op) == "Op(op='remove', sections=(), ids=('a',))"


def test_roles_and_empty_meta_are_held_once() -> None:
    """Decoded sections share their role string and an empty meta; a role table that is full keeps
    new roles as they came (a client cannot grow it), and a given meta stays the section's own."""
    frame = pack(
        delta([append(sec(id="a", role="tool"), sec(id="b", role="tool"), sec(id="c", meta={"k": "v"}))])
    )
    first, second = (wire.decode_delta(frame, MAX) for _ in range(2))
    assert first is not None and second is not None
    a, b, c = first[3][0].sections
    assert a.role == "tool" and a.role is b.role is second[3][0].sections[0].role
    assert a.meta == {} and a.meta is b.meta and c.meta == {"k": "v"}
    before = dict(wire._roles)
    try:
        wire._roles.update({f"r{i}": f"r{i}" for i in range(wire.MAX_ROLES)})
        full = len(wire._roles)
        late = wire.decode_delta(pack(delta([append(sec(role="new-role"))])), MAX)
        assert late is not None and late[3][0].sections[0].role == "new-role" and len(wire._roles) == full
    finally:
        wire._roles.clear()
        wire._roles.update(before)


@given(
    ref=st.integers(0, MAX_INT),
    version=st.integers(-MAX_INT, MAX_INT),
    tokens=st.integers(0, MAX_INT),
)
def test_synced_is_encoded_as_the_reference_would(ref: int, version: int, tokens: int) -> None:
    assert wire.synced(ref, version, tokens) == encode(
        {"t": T.SYNCED, "re": ref, "version": version, "tokens": tokens}
    )


# --- generated frames ------------------------------------------------------------------------------

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=2),
)
ident = st.one_of(st.text(min_size=1, max_size=6), st.sampled_from(["", "x" * 128, "x" * 129, "a\n", "é"]))


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly valid values, sometimes anything (so that many frames are valid, but not all)."""
    return st.integers(0, 24).flatmap(lambda k: junk if k == 0 else valid)


def fields(required: dict[str, Any], optional: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    extra = st.dictionaries(st.sampled_from(["extra", "op", "id", "colour"]), junk, max_size=1)
    return st.tuples(
        st.fixed_dictionaries(required, optional=optional),
        st.integers(0, 9).flatmap(lambda k: extra if k == 0 else st.just({})),
    ).map(lambda parts: parts[0] | parts[1])


section_st = fields(
    {"id": maybe(ident), "kind": maybe(st.sampled_from(sorted(KINDS))), "text": maybe(st.text(max_size=20))},
    {
        "role": maybe(st.text(max_size=3)),
        "tokens": maybe(st.sampled_from([0, 1, 50, MAX_TOKENS, MAX_TOKENS + 1, -1])),
        "priority": maybe(st.sampled_from(PRIORITIES)),
        "pinned": maybe(st.booleans()),
        "group": maybe(st.sampled_from(["", "g1", "g" * 129])),
        "ts": maybe(st.one_of(st.floats(0, MAX_TS * 1.01), st.integers(-1, 2 * 10**11))),
        "meta": maybe(st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=3)),
    },
)
op_st = st.one_of(
    fields(
        {
            "op": maybe(st.sampled_from(["append", "replace"])),
            "sections": maybe(st.lists(section_st, max_size=3)),
        },
        {},
    ),
    fields({"op": maybe(st.just("remove")), "ids": maybe(st.lists(maybe(ident), max_size=3))}, {}),
)
delta_st = fields(
    {
        "v": maybe(st.just(1)),
        "t": maybe(st.just("DELTA")),
        "base": maybe(st.integers(0, 20)),
        "ops": maybe(st.lists(op_st, max_size=3)),
    },
    {"id": maybe(st.integers(0, MAX_INT + 1)), "version": maybe(st.integers(-2, 22))},
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msg=delta_st)
@pytest.mark.slow
def test_generated_frames_agree(msg: dict[str, Any]) -> None:
    try:
        frame = pack(msg)
    except (ValueError, TypeError, OverflowError):  # not encodable (e.g. an int out of range)
        return
    agree(frame)


@settings(max_examples=1500, deadline=None)
@given(
    name=st.sampled_from(sorted(VALID)),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=3),
)
def test_corrupted_frames_agree(name: str, edits: list[tuple[int, int]]) -> None:
    frame = bytearray(VALID[name])
    for at, byte in edits:
        frame[at % len(frame)] = byte
    agree(bytes(frame))


# --- against a real daemon ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    workdir = tmp_path_factory.mktemp("wired")
    proc = DaemonProcess(workdir, None, model=False)
    asyncio.run(proc.wait_ready())
    try:
        yield proc
        assert proc.proc.poll() is None, proc.log_tail()
        assert "internal_error" not in proc.log_path.read_text(errors="replace")
    finally:
        assert proc.stop() == 0, proc.log_tail()


def test_the_daemon_answers_byte_for_byte_as_the_reference_path(daemon: DaemonProcess) -> None:
    """Valid DELTAs (fast path) get the SYNCED, invalid ones (reference path) the ERROR, that the
    reference path encodes; frames sent back to back, so the daemon drains them in batches."""
    zctx: zmq.Context[Any] = zmq.Context()
    sock = zctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(daemon.endpoint)
    try:
        sock.send(encode({"t": T.HELLO, "id": 1, "agent": "wire", "budget": 1_000_000}))
        assert sock.poll(10_000) and decode(sock.recv())["t"] == T.WELCOME
        sock.send(encode({"t": T.SNAPSHOT, "id": 2, "version": 0, "sections": []}))
        assert sock.poll(10_000) and decode(sock.recv())["t"] == T.SYNCED
        sent: list[bytes] = []
        expected: list[bytes] = []
        version = tokens = 0
        for i, (bad, _code) in enumerate(INVALID.values()):  # an invalid frame changes nothing
            good = {
                "t": T.DELTA,
                "id": 100 + i,
                "base": version,
                "ops": [append(sec(id=f"s{i}", tokens=i + 1))],
            }
            sent.append(encode(good))
            version, tokens = version + 1, tokens + i + 1
            expected.append(encode({"t": T.SYNCED, "re": 100 + i, "version": version, "tokens": tokens}))
            ref = reference(bad, 16 * 1024 * 1024)
            assert ref[0] == "error"
            err: dict[str, Any] = {"t": T.ERROR, "code": ref[1], "message": ref[2]}
            if ref[3] is not None:
                err["re"] = ref[3]
            sent.append(bad)
            expected.append(encode(err))
        for frame in sent:
            sock.send(frame)
        got: list[bytes] = []
        for _ in expected:
            assert sock.poll(10_000), f"{len(got)} of {len(expected)} replies"
            got.append(sock.recv())
        assert [decode(g, 1 << 30) for g in got] == [decode(e, 1 << 30) for e in expected]
        assert got == expected
    finally:
        sock.close(0)
        zctx.term()
