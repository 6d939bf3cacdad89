"""How sections are stored: exact text, the other wire fields as msgpack, and a SHA-256 of the
section's canonical wire bytes that every read checks (a damaged row is an error, never silently
wrong text)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from ipc.sections import Section, SectionError
from watcher.store.records import CorruptError, Recalled

MAX_TEXT: Final = 1 << 31


def pack(obj: Any) -> bytes:
    out: bytes = msgpack.packb(obj, use_bin_type=True)
    return out


def section_digest(sec: Section) -> bytes:
    """SHA-256 of the section's canonical wire bytes (what the agent sees, field for field)."""
    return hashlib.sha256(pack(sec.to_wire())).digest()


def _attrs(sec: Section) -> bytes:
    wire = sec.to_wire()
    del wire["id"], wire["kind"], wire["text"]
    return pack(wire)


def _section(section_id: str, kind: str, text: str, attrs: bytes) -> Section:
    wire = msgpack.unpackb(attrs, raw=False)
    wire.update(id=section_id, kind=kind, text=text)
    return Section.from_wire(wire, MAX_TEXT)


def section_bytes(sec: Section) -> int:
    return len(sec.text.encode("utf-8", "surrogatepass")) + len(_attrs(sec))


@dataclass(frozen=True, slots=True)
class ArchiveRows:
    """The encoded rows of an archive entry (:func:`archive_rows`): what :meth:`Archive.put`
    computes before its transaction, prepared anywhere (a thread: it is pure)."""

    rows: tuple[tuple[int, str, str, bytes, bytes], ...]  # (pos, section_id, kind, attrs, sha256)
    texts: tuple[str, ...]
    tokens: int
    bytes: int


def archive_rows(originals: Sequence[Section]) -> ArchiveRows:
    """Attributes, checksums and sizes of ``originals`` (msgpack + SHA-256: the CPU-heavy part of
    archiving, ~50 µs a section)."""
    total = 0
    rows = []
    for pos, sec in enumerate(originals):
        attrs = _attrs(sec)
        total += len(sec.text.encode("utf-8", "surrogatepass")) + len(attrs)
        rows.append((pos, sec.id, sec.kind, attrs, section_digest(sec)))
    return ArchiveRows(tuple(rows), tuple(s.text for s in originals), sum(s.tokens for s in originals), total)


def recalled(row: tuple[Any, ...]) -> Recalled:
    """Decode an originals row ``(ref, session, pos, section_id, kind, text, attrs, sha256)`` and
    check its checksum; CorruptError if it fails."""
    ref, session, pos, sid, kind, text, attrs, digest = row
    try:
        sec = _section(sid, kind, text, attrs)
    except (SectionError, ValueError, msgpack.UnpackException) as exc:
        raise CorruptError(f"archive {ref} position {pos}: cannot decode: {exc}") from exc
    if section_digest(sec) != digest:
        raise CorruptError(f"archive {ref} position {pos} ({sid}) failed its checksum")
    return Recalled(ref, session, pos, sec)
