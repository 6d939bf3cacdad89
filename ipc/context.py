"""An ordered, versioned list of sections: the agent's context, and the daemon's mirror of it.

Both sides apply the same operations, so they stay identical. The order lives in the insertion
order of a dict (id → section), so every DELTA op costs O(change) whatever the context's size:
append adds at the end, replace keeps the position, remove deletes by key. Only applying a
proposal (rare by design: one per compaction) rebuilds the order, O(n); checking one is O(n) in
the worst case too (finding where its run starts), never per delta.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ipc.protocol import Op, Proposal
from ipc.sections import Section


class ContextError(ValueError):
    """An operation does not fit the context (unknown id, duplicate id, ...)."""


class Context:
    def __init__(self, sections: Iterable[Section] = (), version: int = 0) -> None:
        self.version = version
        self._by_id: dict[str, Section] = {}  # insertion order == context order
        self._rev: dict[str, int] = {}  # the version at which each section last changed
        self.tokens = 0
        self._append(sections, version)

    # --- reading ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Section]:
        return iter(self._by_id.values())

    def __contains__(self, sid: object) -> bool:
        return sid in self._by_id

    def get(self, sid: str) -> Section | None:
        return self._by_id.get(sid)

    def index(self, sid: str) -> int:
        """The position of ``sid`` (O(n)); ValueError if absent."""
        for i, key in enumerate(self._by_id):
            if key == sid:
                return i
        raise ValueError(f"{sid!r} is not in the context")

    def ids(self) -> list[str]:
        return list(self._by_id)

    def rev(self, sid: str) -> int:
        return self._rev[sid]

    # --- changing --------------------------------------------------------------------------------
    def apply_ops(self, ops: Iterable[Op], new_version: int) -> None:
        """Apply a DELTA atomically: on error nothing changes. O(sections in the ops)."""
        ops = ops if isinstance(ops, list) else list(ops)
        self._check_ops(ops)
        for op in ops:
            if op.op == "append":
                self._append(op.sections, new_version)
            elif op.op == "replace":
                for sec in op.sections:
                    old = self._by_id[sec.id]
                    self._by_id[sec.id] = sec  # assignment to an existing key keeps its position
                    self._rev[sec.id] = new_version
                    self.tokens += sec.tokens - old.tokens
            else:
                for sid in op.ids:
                    self.tokens -= self._by_id.pop(sid).tokens
                    del self._rev[sid]
        self.version = new_version

    def swap(self, old: Section, new: Section) -> bool:
        """Hold ``new`` in ``old``'s place, if ``old`` is still there: for a section equal to it,
        held differently (ipc.sections.packed). Its position, version and tokens stay."""
        if self._by_id.get(old.id) is not old:
            return False
        self._by_id[old.id] = new
        return True

    def reset(self, sections: Iterable[Section], version: int) -> None:
        """Replace everything (a SNAPSHOT); on a duplicate id nothing changes."""
        old = (self._by_id, self._rev, self.tokens)
        self._by_id, self._rev, self.tokens = {}, {}, 0
        try:
            self._append(sections, version)
        except ContextError:
            self._by_id, self._rev, self.tokens = old
            raise
        self.version = version

    def stale_reason(self, p: Proposal) -> str:
        """ "" if the proposal applies: its sections exist, unchanged since its base, contiguous."""
        if not p.replaces:
            return "empty proposal"
        if len(set(p.replaces)) != len(p.replaces):
            return "replaced ids repeat"
        for sid in p.replaces:
            if sid not in self._by_id:
                return f"section {sid} is gone"
            if self._rev[sid] > p.base:
                return f"section {sid} changed after version {p.base}"
        if self._run(p.replaces) is None:
            return "replaced sections are no longer contiguous"
        seen: set[str] = set()
        for sec in p.digest:
            if (sec.id in self._by_id and sec.id not in p.replaces) or sec.id in seen:
                return f"digest id {sec.id} already in use"
            seen.add(sec.id)
        return ""

    def apply_proposal(self, p: Proposal, new_version: int) -> None:
        reason = self.stale_reason(p)
        if reason:
            raise ContextError(reason)
        replaced = set(p.replaces)
        by_id: dict[str, Section] = {}
        for sid, sec in self._by_id.items():
            if sid not in replaced:
                by_id[sid] = sec
            elif sid == p.replaces[0]:
                for d in p.digest:
                    by_id[d.id] = d
        for sid in p.replaces:
            self.tokens -= self._by_id[sid].tokens
            del self._rev[sid]
        for d in p.digest:
            self._rev[d.id] = new_version
            self.tokens += d.tokens
        self._by_id = by_id
        self.version = new_version

    # --- internals -------------------------------------------------------------------------------
    def _run(self, ids: tuple[str, ...]) -> int | None:
        """The position where ``ids`` occur as a contiguous run in this order, or None."""
        it = iter(self._by_id)
        for pos, key in enumerate(it):
            if key == ids[0]:
                for want in ids[1:]:
                    if next(it, None) != want:
                        return None
                return pos
        return None

    def _append(self, sections: Iterable[Section], version: int) -> None:
        by_id, rev = self._by_id, self._rev
        for sec in sections:
            if sec.id in by_id:
                raise ContextError(f"duplicate section id {sec.id!r}")
            by_id[sec.id] = sec
            rev[sec.id] = version
            self.tokens += sec.tokens

    def _check_ops(self, ops: list[Op]) -> None:
        by_id = self._by_id
        if len(ops) == 1 and ops[0].op == "append":  # the common case, without the bookkeeping
            secs = ops[0].sections
            if len(secs) == 1:
                if secs[0].id in by_id:
                    raise ContextError(f"append: section id {secs[0].id!r} already exists")
                return
        present: set[str] = set()  # ids appended earlier in this same delta
        removed: set[str] = set()
        for op in ops:
            if op.op == "append":
                for sec in op.sections:
                    if (sec.id in by_id and sec.id not in removed) or sec.id in present:
                        raise ContextError(f"append: section id {sec.id!r} already exists")
                    present.add(sec.id)
            elif op.op == "replace":
                for sec in op.sections:
                    if sec.id not in by_id or sec.id in removed:
                        raise ContextError(f"replace: unknown section id {sec.id!r}")
            else:
                for sid in op.ids:
                    if sid not in by_id or sid in removed:
                        raise ContextError(f"remove: unknown section id {sid!r}")
                    removed.add(sid)
