"""Canary facts: plant known sentences into a trajectory, and check what survived compaction.

``compactd replay --canaries FILE --seed N`` reads one fact sentence per line and plants each,
verbatim and on a line of its own, into a section of the trajectory chosen by the seed: user turns,
tool outputs and assistant turns in turn (canary 0 into a user turn, 1 into a tool output, 2 into
an assistant turn, 3 into a user turn, ...). The same seed plants the same canaries in the same
places for every policy, so policies are compared on identical input.

At the end of a trajectory, for each canary whose section was compacted (gone from the context,
or still there with other text, as a masked output is), two questions:

* in context: is the sentence still verbatim somewhere in the agent's context (a digest)?
* recallable: does RECALL of the archive reference that took the section return it verbatim?
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from ipc.sections import Section
from watcher.config.source import read_utf8
from watcher.eval.trajectories import Counter, Trajectory

CANARY_KINDS: Final = ("user", "tool", "assistant")
SECTION_KINDS: Final[dict[str, frozenset[str]]] = {
    "user": frozenset({"user"}),
    "tool": frozenset({"tool_result"}),
    "assistant": frozenset({"assistant", "tool_call"}),
}
MAX_CANARY_CHARS: Final = 200  # a key fact is at most this long in a digest (summarizer.facts)


class CanaryError(ValueError):
    """The canary file is unusable; the message names the file and line."""


@dataclass(frozen=True)
class Canary:
    text: str
    kind: str  # user | tool | assistant
    section: str  # id of the section it was planted in


def load_canaries(path: str | Path) -> list[str]:
    """One sentence per line; blank lines and lines starting with ``#`` are skipped."""
    p = Path(path)
    raw = read_utf8(p, CanaryError)
    out: list[str] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(raw.splitlines(), 1):
        text = " ".join(line.split())
        if not text or text.startswith("#"):
            continue
        if len(text) > MAX_CANARY_CHARS:
            raise CanaryError(f"{p}:{lineno}: canary longer than {MAX_CANARY_CHARS} characters")
        if text in seen:
            raise CanaryError(f"{p}:{lineno}: duplicate of line {seen[text]}")
        seen[text] = lineno
        out.append(text)
    if not out:
        raise CanaryError(f"{p}: no canary sentences (one per line; # starts a comment)")
    return out


def plant(
    traj: Trajectory, sentences: Iterable[str], seed: int, count: Counter
) -> tuple[Trajectory, list[Canary]]:
    """A copy of ``traj`` with the sentences planted, and where each went.

    Sections are drawn without replacement within a kind while there are enough of them; a kind the
    trajectory lacks is skipped. Each sentence goes on its own line at a seeded line boundary.
    ``count`` recounts the tokens of changed sections (the agent's and the daemon's counts agree).
    """
    rng = random.Random(f"{seed}:{traj.name}")
    pools = {
        kind: [s.id for s in traj.sections if s.kind in SECTION_KINDS[kind] and s.text.strip()]
        for kind in CANARY_KINDS
    }
    unused = {kind: list(ids) for kind, ids in pools.items()}
    inserts: dict[str, list[str]] = {}
    canaries: list[Canary] = []
    kinds = [k for k in CANARY_KINDS if pools[k]]
    if not kinds:
        return traj, []
    for i, text in enumerate(sentences):
        kind = kinds[i % len(kinds)]
        if not unused[kind]:
            unused[kind] = list(pools[kind])
        sid = unused[kind].pop(rng.randrange(len(unused[kind])))
        inserts.setdefault(sid, []).append(text)
        canaries.append(Canary(text, kind, sid))

    def changed(sec: Section) -> Section:
        texts = inserts.get(sec.id)
        if not texts:
            return sec
        lines = sec.text.split("\n")
        for text in texts:
            lines.insert(rng.randint(0, len(lines)), text)
        text = "\n".join(lines)
        return replace(sec, text=text, tokens=count(text))

    turns = [[changed(s) for s in turn] for turn in traj.turns]
    return Trajectory(traj.name, traj.fmt, turns), canaries


@dataclass
class CanaryTally:
    """Counts per canary kind; fractions are over the canaries whose section was compacted."""

    planted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CANARY_KINDS, 0))
    compacted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CANARY_KINDS, 0))
    in_context: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CANARY_KINDS, 0))
    recalled: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CANARY_KINDS, 0))
    survived: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CANARY_KINDS, 0))
    lost: list[str] = field(default_factory=list)  # compacted and not verbatim in the context

    def add(self, other: CanaryTally) -> None:
        for mine, theirs in (
            (self.planted, other.planted),
            (self.compacted, other.compacted),
            (self.in_context, other.in_context),
            (self.recalled, other.recalled),
            (self.survived, other.survived),
        ):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
        self.lost.extend(other.lost)

    def metrics(self) -> dict[str, Any]:
        """``canary_in_context`` per kind and ``canary_recall``: None where nothing was compacted."""
        compacted = sum(self.compacted.values())
        return {
            "canary_in_context": {k: _ratio(self.in_context[k], self.compacted[k]) for k in CANARY_KINDS},
            "canary_recall": _ratio(sum(self.recalled.values()), compacted),
            "canaries": {
                k: {
                    "planted": self.planted[k],
                    "compacted": self.compacted[k],
                    "in_context": self.in_context[k],
                    "recalled": self.recalled[k],
                    "verbatim_at_end": self.survived[k],
                }
                for k in CANARY_KINDS
            },
        }


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def score(
    canaries: Iterable[Canary],
    planted: Mapping[str, Section],
    context: Iterable[Section],
    compacted_by: Mapping[str, tuple[str, ...]],
    recalled: Mapping[str, Iterable[Section]],
) -> CanaryTally:
    """Tally what survived.

    ``planted``: the sections as played (id -> section); ``context``: the agent's context at the
    end; ``compacted_by``: section id -> the archive references of the proposal that replaced it;
    ``recalled``: archive reference -> the sections RECALL returned for it.
    """
    live = {s.id: s.text for s in context}
    blob = "\n".join(live.values())
    tally = CanaryTally()
    for c in canaries:
        tally.planted[c.kind] += 1
        in_context = c.text in blob
        tally.survived[c.kind] += in_context
        original = planted.get(c.section)
        gone = c.section not in live or (original is not None and live[c.section] != original.text)
        if not gone:
            continue
        tally.compacted[c.kind] += 1
        if in_context:
            tally.in_context[c.kind] += 1
        else:
            tally.lost.append(c.text)
        refs = compacted_by.get(c.section, ())
        if any(s.id == c.section and c.text in s.text for r in refs for s in recalled.get(r, ())):
            tally.recalled[c.kind] += 1
    return tally
