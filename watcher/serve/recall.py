"""RECALL: an agent fetches its archived originals — by archive reference, by section (or digest)
id, or by a text search — paged, and only from its own scope.

The caller's identity is the authenticated agent (watcher.serve.auth), never a field of the request: a
request that claims another agent is refused with ``unauthorized``; a reference or id another
agent owns is simply not found (the same answer as one that never existed: no existence oracle).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import msgpack

from ipc.protocol import E, ProtocolError, RecallRequest, T
from watcher.store.store import Recalled, Store

DEFAULT_LIMIT: Final = 1000  # sections per page
DEFAULT_HITS: Final = 50
MAX_HITS: Final = 500
MIN_PAGE_BYTES: Final = 64 * 1024


def check_claim(claimed: str | None, agent: str, what: str, ref: int | None) -> None:
    if claimed is not None and claimed != agent:
        raise ProtocolError(
            E.UNAUTHORIZED, f"{what}: this connection is agent {agent!r}; it cannot act for {claimed!r}", ref
        )


def page_bytes(req_max: int, max_frame: int) -> int:
    default = max(MIN_PAGE_BYTES, max_frame // 2)
    return min(req_max, default) if req_max else default


def recall(store: Store, agent: str, req: RecallRequest, ref: int | None, max_frame: int) -> dict[str, Any]:
    """The RECALLED reply for ``req`` in ``agent``'s scope; ProtocolError if something is missing."""
    check_claim(req.agent, agent, "RECALL", ref)
    budget = page_bytes(req.max_bytes, max_frame)
    if req.query:
        return _search(store, agent, req, ref)
    if req.refs:
        return _by_refs(store, agent, req, ref, budget)
    return _by_sections(store, agent, req, ref, budget)


def _missing(what: str, names: list[str], ref: int | None) -> ProtocolError:
    shown = ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return ProtocolError(E.NOT_FOUND, f"RECALL: no {what} {shown} for this agent", ref)


def _by_refs(store: Store, agent: str, req: RecallRequest, ref: int | None, budget: int) -> dict[str, Any]:
    entries = [(r, store.archive.entry(agent, r)) for r in req.refs]
    missing = [r for r, e in entries if e is None]
    if missing:
        raise _missing("archive entry", missing, ref)
    limit = req.limit or DEFAULT_LIMIT
    total = sum(e.sections for _, e in entries if e is not None and e.evicted is None)
    items: list[dict[str, Any]] = []
    skip, taken, size = req.offset, 0, 0
    full = False
    for r, e in entries:
        assert e is not None
        if e.evicted is not None:
            if req.offset == 0:
                items.append({"ref": r, "session": e.session, "sections": [], "evicted": e.evict_reason})
            continue
        if skip >= e.sections:
            skip -= e.sections
            continue
        if full:
            break
        item: dict[str, Any] = {"ref": r, "session": e.session, "sections": []}
        items.append(item)
        for rec in store.archive.originals(agent, r, offset=skip, limit=limit - taken):
            wire = rec.section.to_wire()
            n = _size(wire)
            if taken and (taken >= limit or size + n > budget):
                full = True
                break
            item["sections"].append(wire)
            taken += 1
            size += n
        skip = 0
        if taken >= limit:
            full = True
    reply: dict[str, Any] = {"t": T.RECALLED, "re": ref, "items": items, "total": total}
    if req.offset + taken < total:
        reply["next_offset"] = req.offset + taken
    return reply


def _by_sections(
    store: Store, agent: str, req: RecallRequest, ref: int | None, budget: int
) -> dict[str, Any]:
    found: list[tuple[str, Recalled]] = []
    missing = []
    for sid in req.sections:
        recs = store.archive.by_section(agent, sid)
        if not recs:
            missing.append(sid)
        found.extend((sid, r) for r in recs)
    if missing:
        raise _missing("archived section", missing, ref)
    limit = req.limit or DEFAULT_LIMIT
    page = found[req.offset :]
    items: list[dict[str, Any]] = []
    taken = size = 0
    for asked, rec in page:
        wire = rec.section.to_wire()
        n = _size(wire)
        if taken and (taken >= limit or size + n > budget):
            break
        if not items or items[-1]["ref"] != rec.ref or items[-1]["asked"] != asked:
            items.append({"ref": rec.ref, "session": rec.session, "asked": asked, "sections": []})
        items[-1]["sections"].append(wire)
        taken += 1
        size += n
    reply: dict[str, Any] = {"t": T.RECALLED, "re": ref, "items": items, "total": len(found)}
    if req.offset + taken < len(found):
        reply["next_offset"] = req.offset + taken
    return reply


def _search(store: Store, agent: str, req: RecallRequest, ref: int | None) -> dict[str, Any]:
    limit = min(req.limit or DEFAULT_HITS, MAX_HITS)
    hits, more = store.archive.search(agent, req.query, session=req.session, offset=req.offset, limit=limit)
    reply: dict[str, Any] = {
        "t": T.RECALLED,
        "re": ref,
        "query": req.query,
        "hits": [
            {
                "ref": h.ref,
                "session": h.session,
                "section": h.section_id,
                "kind": h.kind,
                "pos": h.pos,
                "created": h.created,
                "snippet": h.snippet,
            }
            for h in hits
        ],
    }
    if more:
        reply["next_offset"] = req.offset + len(hits)
    return reply


def _size(wire: dict[str, Any]) -> int:
    return len(msgpack.packb(wire, use_bin_type=True))


def sections_page(
    sections: Iterable[dict[str, Any]], offset: int, limit: int, budget: int
) -> tuple[list[dict[str, Any]], int]:
    """Wire sections from ``offset``: at most ``limit`` and about ``budget`` bytes (at least one);
    returns (page, how many were taken)."""
    out: list[dict[str, Any]] = []
    size = 0
    for i, wire in enumerate(sections):
        if i < offset:
            continue
        n = _size(wire)
        if out and (len(out) >= limit or size + n > budget):
            break
        out.append(wire)
        size += n
    return out, len(out)


# --- `compactd recall`: the same scope rules, for a human at a terminal ------------------------------


def human_recall(
    store: Store,
    agent: str,
    targets: list[str],
    *,
    query: str = "",
    session: str | None = None,
    list_entries: bool = False,
    limit: int = 50,
    as_json: bool = False,
) -> tuple[str, int]:
    """What `compactd recall` prints, and how many things were found. ``targets`` are archive
    refs or section/digest ids (tried in that order); every lookup is scoped to ``agent``."""
    records: list[dict[str, Any]] = []
    missing: list[str] = []
    if list_entries:
        for e in store.archive.entries(agent, session=session, limit=limit):
            records.append(
                {
                    "ref": e.ref,
                    "session": e.session,
                    "created": e.created,
                    "sections": e.sections,
                    "tokens": e.tokens,
                    "bytes": e.bytes,
                    "proposal_state": e.state,
                    "evicted": e.evict_reason if e.evicted is not None else None,
                }
            )
    elif query:
        hits, _ = store.archive.search(agent, query, session=session, limit=limit)
        records = [
            {
                "ref": h.ref,
                "session": h.session,
                "section": h.section_id,
                "kind": h.kind,
                "snippet": h.snippet,
            }
            for h in hits
        ]
    else:
        for target in targets:
            entry = store.archive.entry(agent, target)
            if entry is not None and entry.evicted is not None:
                records.append({"ref": target, "evicted": entry.evict_reason})
                continue
            recs = (
                store.archive.originals(agent, target)
                if entry is not None
                else store.archive.by_section(agent, target)
            )
            if not recs:
                missing.append(target)
            records += [
                {"ref": r.ref, "session": r.session, "pos": r.pos, "section": r.section.to_wire()}
                for r in recs
            ]
    if as_json:
        import json

        text = json.dumps({"agent": agent, "records": records, "missing": missing}, indent=2)
    else:
        text = _render(records, missing, agent)
    return text, len(records)


def _render(records: list[dict[str, Any]], missing: list[str], agent: str) -> str:
    lines: list[str] = []
    for r in records:
        if "section" in r and isinstance(r["section"], dict):
            s = r["section"]
            lines.append(f"=== {r['ref']} #{r['pos']}  {s['id']}  {s['kind']}  (session {r['session']})")
            lines.append(s["text"])
        elif "snippet" in r:
            lines.append(f"{r['ref']}  {r['section']}  {r['kind']}  (session {r['session']}): {r['snippet']}")
        elif "evicted" in r and "sections" not in r:
            lines.append(f"=== {r['ref']}: evicted ({r['evicted']})")
        else:
            state = r["proposal_state"] or "-"
            gone = f"  EVICTED ({r['evicted']})" if r["evicted"] else ""
            lines.append(
                f"{r['ref']:<10} {r['session'][:16]:<16} {r['sections']:>5} sections {r['tokens']:>8} tokens"
                f"  proposal {state}{gone}"
            )
    for m in missing:
        lines.append(f"compactd: {m!r}: no archive entry or archived section of agent {agent!r}")
    return "\n".join(lines)
