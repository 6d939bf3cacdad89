"""Needed-fact retention (NFR): of what the agent went back to, how much compaction kept in view.

A trajectory is replayed turn by turn (watcher.eval.replay); LLM call ``k`` follows turn ``k`` and writes
the agent's sections of turn ``k + 1``. For every original section a proposal took out of the
context (``removed[sid]`` = the first LLM call without it), the identifiers of that section
(watcher.planning.identifiers) that an agent-written section of a later turn names again, while no other
original still in the context for the call that wrote it holds them, are *needed*. A needed
identifier is *kept* when a section in the context at that call (a digest, or whatever a policy put
in the section's place) holds it verbatim. NFR = kept / needed, each (section, identifier) pair
counted once, at the first call that needed it.

Unlike regret (watcher.eval.regret, which judges only the planner's choice of what to fold), NFR judges
planner and summarizer together, on what the agent really went back to. Pure functions of what the
replay records: the trajectory's turns, ``removed``, and the replacement sections with the first
call that saw each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ipc.sections import Section
from watcher.eval.regret import TurnIndex
from watcher.planning.identifiers import identifiers


@dataclass(frozen=True)
class Retention:
    needed: int  # (section, identifier) pairs the agent went back to while no original held them
    kept: int  # ... of which a replacement section in the context held the identifier verbatim
    lost: tuple[str, ...] = ()  # "section:identifier" of the needed pairs not kept (first 20)

    @property
    def nfr(self) -> float | None:
        return self.kept / self.needed if self.needed else None

    def metrics(self) -> dict[str, float | int | list[str] | None]:
        nfr = self.nfr
        return {
            "needed_fact_retention": round(nfr, 4) if nfr is not None else None,
            "needed_facts": self.needed,
            "needed_facts_kept": self.kept,
            "needed_facts_lost": list(self.lost),
        }


def retention(
    turns: Sequence[Sequence[Section]],
    removed: Mapping[str, int],
    added: Mapping[str, tuple[str, int]],
    idents: Callable[[str], frozenset[str]] = identifiers,
) -> Retention:
    """NFR of a replay: ``removed`` (section id -> first LLM call without it, originals and
    replacements alike) and ``added`` (replacement id -> (its text, the first LLM call with it))."""
    ix = TurnIndex.of(turns, idents)
    never = len(turns) + 1

    def replacement_holds(x: str, call: int) -> bool:
        return any(
            first <= call < removed.get(rid, never) and x in text for rid, (text, first) in added.items()
        )

    needed = kept = 0
    lost: list[str] = []
    for sid, gone in sorted(removed.items()):
        if sid not in ix.turn_of:  # a replacement (digest) or an id from outside the trajectory
            continue
        pending = set(ix.ids_of[sid])
        for u in range(max(gone + 1, ix.turn_of[sid] + 1), len(turns)):
            for x in sorted(pending & ix.agent_refs[u]):
                if ix.held_elsewhere(x, u - 1, sid, removed):
                    continue  # superseded: another original in view holds it
                pending.discard(x)
                needed += 1
                if replacement_holds(x, u - 1):
                    kept += 1
                elif len(lost) < 20:
                    lost.append(f"{sid}:{x}")
            if not pending:
                break
    return Retention(needed, kept, tuple(lost))


def pooled(runs: Sequence[Mapping[str, object]]) -> dict[str, float | int | None]:
    """The NFR of many runs' metrics (kept / needed, pooled over runs)."""
    needed = sum(int(str(m.get("needed_facts") or 0)) for m in runs)
    kept = sum(int(str(m.get("needed_facts_kept") or 0)) for m in runs)
    nfr = Retention(needed, kept).nfr
    return {
        "needed_fact_retention": round(nfr, 4) if nfr is not None else None,
        "needed_facts": needed,
        "needed_facts_kept": kept,
    }
