"""docs/PROTOCOL.md is the contract: it names every message type and error code, and every byte
dump in its worked example is exactly the msgpack encoding of the JSON shown above it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgpack

from ipc.protocol import NACK_REASONS, E, T, decode

DOC = Path(__file__).resolve().parents[2] / "docs" / "PROTOCOL.md"
BLOCK = re.compile(
    r"```json\n(?P<json>.*?)\n```\s*\n(?:\d+ bytes:\s*\n)?\s*(?:```hex\n(?P<hex>.*?)\n```)?", re.S
)


def test_every_message_type_and_error_code_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    for name, value in vars(T).items():
        if name.isupper():
            assert f"| [{value}]" in text or f"### {value}" in text or f"{value} |" in text, value
    for name, value in vars(E).items():
        if name.isupper():
            assert f"| `{value}` |" in text, f"error code {value} missing from the errors table"
    for reason in NACK_REASONS:
        assert f"`{reason}`" in text


def test_the_worked_example_bytes_match_their_json() -> None:
    blocks = list(BLOCK.finditer(DOC.read_text(encoding="utf-8")))
    dumps = [b for b in blocks if b["hex"]]
    assert len(dumps) >= 15
    for b in dumps:
        obj = json.loads(b["json"])
        frame = bytes.fromhex(b["hex"].replace("\n", " "))
        assert msgpack.unpackb(frame, raw=False) == obj
        assert msgpack.packb(obj) == frame, f"{obj['t']}: the dump is not the default encoding"
        assert decode(frame)["t"] == obj["t"]
    for b in blocks:  # the ones without bytes are valid JSON maps too
        assert isinstance(json.loads(b["json"]), dict)
