"""The malformed frames of `compactd bench fuzz` (watcher.eval.bench.fuzz): one maker per kind.

Each maker returns the bytes of one frame that a daemon must answer with exactly one ERROR.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from typing import Any, Final

import msgpack

from ipc.protocol import encode

KINDS: Final = ("random", "truncated", "types", "lengths", "version", "unknown", "dupids", "multipart")


# --- frame makers -----------------------------------------------------------------------------------


def sec(sid: str, text: str = "fuzz text") -> dict[str, Any]:
    return {"id": sid, "kind": "user", "text": text}


def _valid(rng: random.Random) -> dict[str, Any]:
    t = rng.choice(["HELLO", "DELTA", "SNAPSHOT", "ACK", "NACK", "RECALL", "CHECKPOINT", "RESTORE"])
    msg: dict[str, Any] = {"v": 1, "t": t, "id": rng.randint(1, 1 << 30)}
    if t == "HELLO":
        msg |= {"agent": f"fz-{rng.randint(0, 9)}", "budget": 4000, "policy": "off"}
    elif t == "DELTA":
        msg |= {"base": 1, "version": 2, "ops": [{"op": "append", "sections": [sec("a1")]}]}
    elif t == "SNAPSHOT":
        msg |= {"version": 1, "sections": [sec("s1"), sec("s2")]}
    elif t == "ACK":
        msg |= {"proposal": "p1", "version": 2}
    elif t == "NACK":
        msg |= {"proposal": "p1", "reason": "stale"}
    elif t == "RECALL":
        msg |= {"refs": ["a1"]}
    elif t == "CHECKPOINT":
        msg |= {"op": "save", "name": "cp", "epoch": 0}
    else:
        msg |= {"name": "cp", "epoch": 0}
    return msg


# Field values that are wrong for the field: type, range or shape. A frame gets one of them.
_BAD: Final[dict[str, dict[str, list[Any]]]] = {
    "HELLO": {
        "agent": [123, "", "x" * 300, None, ["a"], "bad\x00name", {"a": 1}],
        "budget": ["1000", -1, 0, 10**12, None, 1.5, True, (1 << 64) - 1],
        "reserve": [2.0, -0.1, "0.1", True, float("nan")],
        "session": [5, "", "s" * 300],
        "policy": ["sometimes", 3, ""],
    },
    "DELTA": {
        "base": ["0", -5, None, 1.5, [1], -(1 << 63)],
        "ops": [
            5,
            "x",
            [5],
            [{"op": "explode"}],
            [{"op": "append", "sections": [{"id": 5, "kind": "user", "text": "x"}]}],
            [{"op": "append", "sections": [{"id": "a", "kind": "bogus", "text": "x"}]}],
            [{"op": "append", "sections": [{"id": "a", "kind": "user", "text": 7}]}],
            [{"op": "append", "sections": [{"id": "a", "kind": "user", "text": "x", "tokens": -5}]}],
            [{"op": "append", "sections": [{"id": "a", "kind": "user", "text": "x", "meta": {"k": 5}}]}],
            [{"op": "append", "sections": [{"id": "a", "kind": "user", "text": "x", "priority": "max"}]}],
            [{"op": "append", "sections": [{"id": "i" * 200, "kind": "user", "text": "x"}]}],
            [{"op": "remove", "ids": [1, 2]}],
            [{"op": "replace", "sections": "nope"}],
        ],
    },
    "SNAPSHOT": {
        "version": [-1, "1", None, 2.5],
        "sections": [5, {"a": 1}, [1, 2], [{"id": "a", "kind": "user", "text": 5}], [None]],
        "part": [-1, "0"],
        "more": ["yes", 1],
    },
    "ACK": {"proposal": [5, "", None, "p" * 300], "version": ["1", None]},
    "NACK": {"proposal": [5, ""], "reason": ["because", 5, None]},
    "RECALL": {"refs": [5, [1], "x", [None]]},
    "CHECKPOINT": {"op": ["rename", 5], "name": [5, None, "n" * 300], "epoch": [-1, "1"]},
    "RESTORE": {"name": [5, None, ""], "epoch": ["x", -1, None], "force": ["yes"]},
}


def f_random(rng: random.Random) -> bytes:
    data = rng.randbytes(rng.randint(0, 512))
    with contextlib.suppress(Exception):  # on the rare chance it is a valid map, spoil it
        if isinstance(msgpack.unpackb(data), dict):
            return b"\xc1" + data
    return data


def f_truncated(rng: random.Random) -> bytes:
    full = encode(_valid(rng))
    return full[: rng.randint(0, len(full) - 1)]


def f_types(rng: random.Random) -> bytes:
    msg = _valid(rng)
    bad = _BAD[msg["t"]]
    key = rng.choice(sorted(bad))
    msg[key] = rng.choice(bad[key])
    if rng.random() < 0.2:
        msg["id"] = rng.choice(["x", -1, None, 1.5, [1]])  # a request id of the wrong type
    return bytes(msgpack.packb(msg, use_bin_type=True))


_LENGTH_HEADERS: Final = (
    b"\xdb\xff\xff\xff\xff",  # str32 of 4 GiB
    b"\xdd\x7f\xff\xff\xff",  # array32 of 2^31 items
    b"\xdf\xff\xff\xff\xff",  # map32 of 2^32 entries
    b"\xc6\xff\xff\xff\xff",  # bin32 of 4 GiB
    b"\xc9\x7f\xff\xff\xff\x01",  # ext32
    b"\xda\xff\xff",  # str16 of 64 KiB with nothing behind it
)


def f_lengths(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.15:
        depth = rng.randint(1000, 60000)  # deep nesting, within the size limit
        return (b"\x91" * depth) + b"\xc0"
    header = rng.choice(_LENGTH_HEADERS)
    if roll < 0.6:  # as the value of a field inside an otherwise plausible message
        prefix = b"\x83\xa1v\x01\xa1t\xa5HELLO\xa5agent"
        return prefix + header + rng.randbytes(rng.randint(0, 64))
    return header + rng.randbytes(rng.randint(0, 64))


def f_version(rng: random.Random) -> bytes:
    msg = _valid(rng)
    choice = rng.choice([0, 2, -1, 1 << 40, "1", None, 1.0, True, [1], "missing"])
    if choice == "missing":
        del msg["v"]
    else:
        msg["v"] = choice
    return bytes(msgpack.packb(msg, use_bin_type=True))


def f_unknown(rng: random.Random) -> bytes:
    t = rng.choice(["HELO", "", "x" * 1000, "DROP TABLE", "\u2603", "hello", 7, None, ["HELLO"], b"HELLO"])
    return bytes(msgpack.packb({"v": 1, "t": t, "id": rng.randint(1, 99)}, use_bin_type=True))


def f_dupids(rng: random.Random) -> bytes:
    secs = [sec("dup", "one"), sec("other"), sec("dup", "two")]
    rng.shuffle(secs)
    if rng.random() < 0.5:
        msg: dict[str, Any] = {"v": 1, "t": "SNAPSHOT", "version": 3, "sections": secs}
    else:
        msg = {"v": 1, "t": "DELTA", "base": 0, "ops": [{"op": "append", "sections": secs}]}
    return bytes(msgpack.packb(msg, use_bin_type=True))


MAKERS: Final[dict[str, Callable[[random.Random], bytes]]] = {
    "random": f_random,
    "truncated": f_truncated,
    "types": f_types,
    "lengths": f_lengths,
    "version": f_version,
    "unknown": f_unknown,
    "dupids": f_dupids,
}
