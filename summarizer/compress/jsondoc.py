"""JSON documents and JSON lines: shape, counts, first and last items, outliers.

A tool's output wrapped in JSON (Codex CLI's `{"output": ..., "metadata": {"exit_code": ...}}`, a
sandbox's `{"stdout": ..., "stderr": ..., "returncode": ...}`, an MCP tool's text field) is an object
whose bulk is one or two multi-line strings: its *text payloads* (`text_payloads`). Such a value is
not described as a string of N characters: the caller compresses it as what it is (a log, a diff, a
file read: `Payload`, from summarizer.compress.Renderer) and its lines are shown decoded, each a
verbatim line of the value (summarizer.frame accepts those). Short values are shown whole, so an
exit code is not reduced to its key.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from summarizer.compress.logs import compress_log
from summarizer.compress.out import Out

# (rendering, dropped chars) of a text payload compressed as its own kind, its header line first
Payload = Callable[[str], tuple[str, int]]
PAYLOAD_MIN_CHARS: Final = 400
PAYLOAD_MIN_LINES: Final = 5
PAYLOAD_SHARE: Final = 0.5  # of the document's characters, the payloads hold at least this much
_SMALL_CHARS = 200


def text_payloads(data: Any, size: int) -> list[str]:
    """The keys of `data`'s multi-line string values (at least PAYLOAD_MIN_LINES lines and
    PAYLOAD_MIN_CHARS characters) when they hold at least PAYLOAD_SHARE of the `size` characters
    of the document; [] for anything else (an array, a document of many fields)."""
    if not isinstance(data, dict):
        return []
    keys = [
        k
        for k, v in data.items()
        if isinstance(v, str) and len(v) >= PAYLOAD_MIN_CHARS and v.count("\n") >= PAYLOAD_MIN_LINES
    ]
    return keys if sum(len(data[k]) for k in keys) >= PAYLOAD_SHARE * size else []


def decoded_payloads(body: str) -> list[str]:
    """The text payloads of a JSON document `body` (`text_payloads`), decoded; [] when it is none
    (not JSON, or not an object whose bulk is multi-line text). Cheap for other texts."""
    if not body[:256].lstrip().startswith("{"):
        return []
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return []
    return [data[k] for k in text_payloads(data, len(body))]


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


def _compact(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[:limit] + "…"


def _small(value: Any) -> bool:
    """A value shown whole beside a text payload: a number, a flag, null, or a short object/array."""
    if value is None or isinstance(value, int | float | bool):
        return True
    return isinstance(value, dict | list) and len(_compact(value, _SMALL_CHARS + 1)) <= _SMALL_CHARS


def _describe(value: Any) -> str:
    if isinstance(value, list):
        kinds = sorted({_type_name(v) for v in value[:1000]})
        inner = "|".join(kinds) if kinds else "empty"
        if kinds == ["object"]:
            inner = "object{" + ", ".join(list(dict.fromkeys(k for v in value[:50] for k in v))[:8]) + "}"
        return f"array[{len(value)}] of {inner}"
    if isinstance(value, dict):
        keys = list(value)
        more = f", … +{len(keys) - 8}" if len(keys) > 8 else ""
        return "object{" + ", ".join(keys[:8]) + more + "}"
    return f"{_type_name(value)} {_compact(value, 80)}"


def _schema(items: list[dict[str, Any]]) -> str:
    types: dict[str, set[str]] = {}
    for item in items[:5000]:
        for key, value in item.items():
            types.setdefault(key, set()).add(_type_name(value))
    fields = [f"{k}: {'|'.join(sorted(v))}" for k, v in list(types.items())[:40]]
    more = f", … +{len(types) - 40} keys" if len(types) > 40 else ""
    return "schema: {" + ", ".join(fields) + more + "}"


def _outliers(items: list[dict[str, Any]], out: Out) -> None:
    keysets = [frozenset(item) for item in items]
    counts = Counter(keysets)  # insertion-ordered: on a tie the key set seen first wins
    common = max(counts, key=counts.__getitem__)
    odd = [i for i, ks in enumerate(keysets) if ks != common]
    if not odd:
        return
    out.note(f"outliers: {len(odd)} items with other keys than the common {len(common)}-key set")
    for i in odd[:5]:
        extra = sorted(keysets[i] - common)[:5]
        missing = sorted(common - keysets[i])[:5]
        diff = " ".join([*(f"+{k}" for k in extra), *(f"-{k}" for k in missing)])
        out.note(f"  [{i}] {diff}: {_compact(items[i], 200)}")


def _json_array(data: list[Any], out: Out) -> str:
    out.note(f"count: {len(data)}")
    objects = [v for v in data if isinstance(v, dict)]
    if objects and len(objects) == len(data):
        out.note(_schema(objects))
    else:
        kinds = Counter(_type_name(v) for v in data)
        out.note("item types: " + ", ".join(f"{k}×{n}" for k, n in sorted(kinds.items())))
    if data:
        out.note(f"first: {_compact(data[0])}")
    if len(data) > 1:
        out.note(f"last: {_compact(data[-1])}")
    if objects and len(objects) == len(data):
        _outliers(objects, out)
    return f"json: array of {len(data)} items"


def _json_object(data: dict[str, Any], out: Out, payloads: list[str], payload: Payload | None) -> int:
    """The object's keys, described; its text payloads compressed by `payload`. Returns the chars
    the payloads' own omission markers account for."""
    accounted = 0
    for key in list(data)[:40]:
        value = data[key]
        if key in payloads and payload is not None:
            rendering, dropped = payload(value)
            out.note(f"{key}: str, {value.count(chr(10)) + 1} lines")
            for line in rendering.split("\n"):
                out.keep_whole(line)
            accounted += dropped
        elif payloads and _small(value):
            out.note(f"{key}: {_compact(value)}")  # beside a payload: an exit code, its metadata
        else:
            out.note(f"{key}: {_describe(value)}")
    if len(data) > 40:
        out.note(f"… +{len(data) - 40} more keys")
    return accounted


def _parse_json(body: str) -> tuple[Any, bool]:
    """The parsed document, and whether it was JSON lines (one value per line)."""
    try:
        return json.loads(body), False
    except (ValueError, RecursionError):
        return [json.loads(ln) for ln in body.splitlines() if ln.strip()], True


def compress_json(body: str, ref: str, payload: Payload | None = None) -> tuple[str, str, int]:
    try:
        data, lines_format = _parse_json(body)
    except (ValueError, RecursionError):
        return compress_log(body, ref)  # not JSON after all
    out = Out(ref)
    accounted = 0
    if isinstance(data, dict):
        accounted = _json_object(data, out, text_payloads(data, len(body)), payload)
        header = f"json: object with {len(data)} keys"
    elif isinstance(data, list):
        header = _json_array(data, out) + (" (JSON lines)" if lines_format else "")
    else:
        out.note(f"value: {_compact(data)}")
        header = f"json: {_type_name(data)}"
    shown = sum(len(ln) for ln in out.lines)
    out.omit(max(0, len(body) - shown - accounted))
    return header, out.render(), out.dropped + accounted
