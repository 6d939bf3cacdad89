"""Regret: how often compaction folded away something the agent needed again.

A trajectory is played turn by turn; after turn ``k`` is appended the agent makes LLM call ``k``,
whose answer is the agent's section(s) of turn ``k + 1``. ``removed[sid] = k`` says that section
``sid`` was gone (folded into a digest) from LLM call ``k`` on.

A compacted section is *regretted* when one of its identifiers (file names, code names, error
names: watcher.planning.identifiers) is referenced by an agent-written section (``assistant`` or
``tool_call``) of a later turn ``u`` (``u > removed[sid]``) while no section still in the
context for the call that wrote it holds that identifier verbatim. That last clause keeps
superseded output honest: folding the first of two reads of the same file is no loss when the
second read is still there (and the metric would otherwise punish exactly what the planner should
do). ``regret_raw`` drops the clause: any later reference counts.

Digest texts are not consulted: regret measures the planner's choice of what to fold, not how
much of it the summarizer kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ipc.sections import Section
from watcher.planning.identifiers import identifiers

AGENT_KINDS = frozenset({"assistant", "tool_call"})


@dataclass(frozen=True)
class Regret:
    compacted: int  # compacted trajectory sections
    regretted: int  # referenced later while absent from the context
    regretted_raw: int  # referenced later at all
    regretted_ids: tuple[str, ...] = ()

    @property
    def regret(self) -> float:
        return self.regretted / self.compacted if self.compacted else 0.0

    @property
    def regret_raw(self) -> float:
        return self.regretted_raw / self.compacted if self.compacted else 0.0

    def metrics(self) -> dict[str, float | int]:
        return {
            "regret": round(self.regret, 4),
            "regret_raw": round(self.regret_raw, 4),
            "compacted_sections": self.compacted,
            "regretted_sections": self.regretted,
        }


@dataclass
class TurnIndex:
    """Where the identifiers of a trajectory's sections are, and which ones the agent named."""

    turn_of: dict[str, int]  # section id -> its turn
    ids_of: dict[str, frozenset[str]]  # section id -> its identifiers
    where: dict[str, list[tuple[int, str]]]  # identifier -> (turn, section id), in order
    agent_refs: list[frozenset[str]]  # per turn: the identifiers its agent-written sections name

    @classmethod
    def of(cls, turns: Sequence[Sequence[Section]], idents: Callable[[str], frozenset[str]]) -> TurnIndex:
        ix = cls({}, {}, {}, [])
        for t, turn in enumerate(turns):
            refs: set[str] = set()
            for s in turn:
                found = idents(s.text)
                ix.turn_of[s.id] = t
                ix.ids_of[s.id] = found
                for x in found:
                    ix.where.setdefault(x, []).append((t, s.id))
                if s.kind in AGENT_KINDS:
                    refs |= found
            ix.agent_refs.append(frozenset(refs))
        return ix

    def held_elsewhere(self, x: str, call: int, sid: str, removed: Mapping[str, int]) -> bool:
        """Is ``x`` held by an original section (not ``sid``) that LLM call ``call`` still saw?"""
        never = len(self.agent_refs) + 1
        for t, other in self.where.get(x, ()):
            if t > call:
                return False
            if other != sid and removed.get(other, never) > call:
                return True
        return False


def regret(
    turns: Sequence[Sequence[Section]],
    removed: Mapping[str, int],
    idents: Callable[[str], frozenset[str]] = identifiers,
) -> Regret:
    """Regret of folding the sections in ``removed`` (id -> first LLM call without it)."""
    ix = TurnIndex.of(turns, idents)
    turn_of, ids_of, agent_refs = ix.turn_of, ix.ids_of, ix.agent_refs

    def live_elsewhere(x: str, call: int, sid: str) -> bool:
        return ix.held_elsewhere(x, call, sid, removed)

    compacted = regretted = raw = 0
    hit: list[str] = []
    for sid, gone in removed.items():
        if sid not in turn_of:  # a digest or an id from outside the trajectory
            continue
        compacted += 1
        mine = ids_of[sid]
        referenced = lost = False
        for u in range(max(gone + 1, turn_of[sid] + 1), len(turns)):
            common = mine & agent_refs[u]
            if not common:
                continue
            referenced = True
            if any(not live_elsewhere(x, u - 1, sid) for x in sorted(common)):
                lost = True
                break
        raw += referenced
        if lost:
            regretted += 1
            hit.append(sid)
    return Regret(compacted, regretted, raw, tuple(hit))
