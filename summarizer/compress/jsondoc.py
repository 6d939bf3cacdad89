"""JSON documents and JSON lines: shape, counts, first and last items, outliers."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from summarizer.compress.logs import compress_log
from summarizer.compress.out import Out


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


def _compact(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[:limit] + "…"


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


def _json_object(data: dict[str, Any], out: Out) -> str:
    for key in list(data)[:40]:
        out.note(f"{key}: {_describe(data[key])}")
    if len(data) > 40:
        out.note(f"… +{len(data) - 40} more keys")
    return f"json: object with {len(data)} keys"


def _parse_json(body: str) -> tuple[Any, bool]:
    """The parsed document, and whether it was JSON lines (one value per line)."""
    try:
        return json.loads(body), False
    except (ValueError, RecursionError):
        return [json.loads(ln) for ln in body.splitlines() if ln.strip()], True


def compress_json(body: str, ref: str) -> tuple[str, str, int]:
    try:
        data, lines_format = _parse_json(body)
    except (ValueError, RecursionError):
        return compress_log(body, ref)  # not JSON after all
    out = Out(ref)
    if isinstance(data, dict):
        header = _json_object(data, out)
    elif isinstance(data, list):
        header = _json_array(data, out) + (" (JSON lines)" if lines_format else "")
    else:
        out.note(f"value: {_compact(data)}")
        header = f"json: {_type_name(data)}"
    shown = sum(len(ln) for ln in out.lines)
    out.omit(max(0, len(body) - shown))
    return header, out.render(), out.dropped
