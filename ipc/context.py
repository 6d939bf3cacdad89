"""An ordered, versioned list of sections: the agent's context, and the daemon's mirror of it.

Both sides apply the same operations, so they stay byte-identical. Appends and replacements cost
O(change); removals and proposals rebuild the order (O(n)), which is rare by design.
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
        self._order: list[str] = []
        self._by_id: dict[str, Section] = {}
        self._rev: dict[str, int] = {}  # the version at which each section last changed
        self.tokens = 0
        self._append(sections)

    # --- reading ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[Section]:
        return (self._by_id[i] for i in self._order)

    def __contains__(self, sid: object) -> bool:
        return sid in self._by_id

    def get(self, sid: str) -> Section | None:
        return self._by_id.get(sid)

    def index(self, sid: str) -> int:
        return self._order.index(sid)

    def ids(self) -> list[str]:
        return list(self._order)

    def rev(self, sid: str) -> int:
        return self._rev[sid]

    # --- changing --------------------------------------------------------------------------------
    def apply_ops(self, ops: Iterable[Op], new_version: int) -> None:
        """Apply a DELTA atomically: on error nothing changes."""
        ops = list(ops)
        self._check_ops(ops)
        for op in ops:
            if op.op == "append":
                self._append(op.sections, new_version)
            elif op.op == "replace":
                for sec in op.sections:
                    old = self._by_id[sec.id]
                    self._by_id[sec.id] = sec
                    self._rev[sec.id] = new_version
                    self.tokens += sec.tokens - old.tokens
            else:
                self._remove(op.ids)
        self.version = new_version

    def reset(self, sections: Iterable[Section], version: int) -> None:
        self._order, self._by_id, self._rev, self.tokens = [], {}, {}, 0
        self._append(sections, version)
        self.version = version

    def stale_reason(self, p: Proposal) -> str:
        """ "" if the proposal applies: its sections exist, unchanged since its base, contiguous."""
        if not p.replaces:
            return "empty proposal"
        for sid in p.replaces:
            if sid not in self._by_id:
                return f"section {sid} is gone"
            if self._rev[sid] > p.base:
                return f"section {sid} changed after version {p.base}"
        start = self._order.index(p.replaces[0])
        if self._order[start : start + len(p.replaces)] != list(p.replaces):
            return "replaced sections are no longer contiguous"
        for sec in p.digest:
            if sec.id in self._by_id and sec.id not in p.replaces:
                return f"digest id {sec.id} already in use"
        return ""

    def apply_proposal(self, p: Proposal, new_version: int) -> None:
        reason = self.stale_reason(p)
        if reason:
            raise ContextError(reason)
        start = self._order.index(p.replaces[0])
        for sid in p.replaces:
            self.tokens -= self._by_id.pop(sid).tokens
            del self._rev[sid]
        digest_ids = [s.id for s in p.digest]
        self._order[start : start + len(p.replaces)] = digest_ids
        for sec in p.digest:
            self._by_id[sec.id] = sec
            self._rev[sec.id] = new_version
            self.tokens += sec.tokens
        self.version = new_version

    # --- internals -------------------------------------------------------------------------------
    def _append(self, sections: Iterable[Section], version: int = 0) -> None:
        for sec in sections:
            if sec.id in self._by_id:
                raise ContextError(f"duplicate section id {sec.id!r}")
            self._order.append(sec.id)
            self._by_id[sec.id] = sec
            self._rev[sec.id] = version
            self.tokens += sec.tokens

    def _remove(self, ids: Iterable[str]) -> None:
        gone = set(ids)
        for sid in gone:
            self.tokens -= self._by_id.pop(sid).tokens
            del self._rev[sid]
        self._order = [i for i in self._order if i not in gone]

    def _check_ops(self, ops: list[Op]) -> None:
        present = set()  # ids appended earlier in this same delta
        removed: set[str] = set()
        for op in ops:
            if op.op == "append":
                for sec in op.sections:
                    if (sec.id in self._by_id and sec.id not in removed) or sec.id in present:
                        raise ContextError(f"append: section id {sec.id!r} already exists")
                    present.add(sec.id)
            elif op.op == "replace":
                for sec in op.sections:
                    if sec.id not in self._by_id or sec.id in removed:
                        raise ContextError(f"replace: unknown section id {sec.id!r}")
            else:
                for sid in op.ids:
                    if sid not in self._by_id or sid in removed:
                        raise ContextError(f"remove: unknown section id {sid!r}")
                    removed.add(sid)
