"""Caps on what agents may make the daemon hold: agents attached, sections and bytes per agent, and
bytes in all mirrors together (``[daemon] max_*``, reloadable).

Every check runs *before* anything changes: a frame that would cross a cap is refused with an ERROR
of code ``limit`` naming the cap and the config key, and the mirror stays exactly as it was (the
agent can shrink its context and send a SNAPSHOT). Bytes are the UTF-8 size of a section's text
plus its id and metadata, counted incrementally: a DELTA costs O(its sections), not O(context).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Protocol

from ipc.context import Context
from ipc.protocol import E, Op, ProtocolError
from ipc.sections import Section, text_bytes, utf8_len
from watcher.serve.session import Session


class LimitConfig(Protocol):  # the [daemon] keys read here (watcher.config.settings.DaemonConfig)
    @property
    def max_agents(self) -> int: ...
    @property
    def max_sections_per_agent(self) -> int: ...
    @property
    def max_bytes_per_agent(self) -> int: ...
    @property
    def max_total_bytes(self) -> int: ...


def section_bytes(s: Section) -> int:
    n = text_bytes(s) + len(s.id)
    if s.meta:
        n += sum(utf8_len(k) + utf8_len(v) for k, v in s.meta.items())
    return n


def sections_bytes(sections: Iterable[Section]) -> int:
    return sum(section_bytes(s) for s in sections)


def mirror_bytes(ctx: Context) -> int:
    """Recount a whole mirror (O(n); after a SNAPSHOT or an applied proposal)."""
    return sections_bytes(ctx)


def held_bytes(a: Session) -> int:
    """What one agent makes the daemon hold: its mirror and a multi-part SNAPSHOT being staged."""
    return a.nbytes + (a.staged.nbytes if a.staged is not None else 0)


def total_bytes(agents: Iterable[Session]) -> int:
    return sum(held_bytes(a) for a in agents)


class Meter:
    """The bytes all agents hold, kept incrementally (summing 200 agents per delta costs more than
    the delta) and recounted from scratch at most every :attr:`RECOUNT_S`: an agent that left is
    still counted until then, which errs on the safe side of the cap."""

    RECOUNT_S = 1.0

    def __init__(self) -> None:
        self._total = 0
        self._at = float("-inf")

    def total(self, agents: Iterable[Session]) -> int:
        now = time.monotonic()
        if now - self._at >= self.RECOUNT_S:
            self._total, self._at = total_bytes(agents), now
        return self._total

    def set(self, state: Session, nbytes: int) -> None:
        """``state.nbytes = nbytes``, keeping the total in step."""
        self._total += nbytes - state.nbytes
        state.nbytes = nbytes


def _mb(n: int) -> str:
    return f"{n / 1048576:.1f} MiB" if n >= 1048576 else f"{n} bytes"


def check_agents(cfg: LimitConfig, attached: int, agent: str, ref: int | None) -> None:
    """A new agent id may attach only below ``max_agents`` (the same id reattaching is not new)."""
    if attached >= cfg.max_agents:
        raise ProtocolError(
            E.LIMIT,
            f"HELLO refused: {attached} agents are attached, the limit (daemon.max_agents) is "
            f"{cfg.max_agents}; agent {agent!r} was not attached",
            ref,
        )


def check_size(
    cfg: LimitConfig,
    what: str,
    agent: str,
    sections: int,
    nbytes: int,
    others_bytes: int,
    ref: int | None,
) -> None:
    """Refuse (ERROR ``limit``) if an agent's mirror would hold more than its caps allow, or all
    mirrors together more than ``max_total_bytes``; ``others_bytes`` is what the other agents hold."""
    fix = "nothing was applied; compact or remove sections and send a SNAPSHOT"
    if sections > cfg.max_sections_per_agent:
        raise ProtocolError(
            E.LIMIT,
            f"{what} refused: agent {agent!r} would hold {sections} sections, over the limit of "
            f"{cfg.max_sections_per_agent} (daemon.max_sections_per_agent); {fix}",
            ref,
        )
    if nbytes > cfg.max_bytes_per_agent:
        raise ProtocolError(
            E.LIMIT,
            f"{what} refused: agent {agent!r} would hold {_mb(nbytes)} of sections, over the limit "
            f"of {_mb(cfg.max_bytes_per_agent)} (daemon.max_bytes_per_agent); {fix}",
            ref,
        )
    if others_bytes + nbytes > cfg.max_total_bytes:
        raise ProtocolError(
            E.LIMIT,
            f"{what} refused: all agents together would hold {_mb(others_bytes + nbytes)} of "
            f"sections, over the daemon's limit of {_mb(cfg.max_total_bytes)} "
            f"(daemon.max_total_bytes); {fix}",
            ref,
        )


def delta_effect(ctx: Context, ops: Sequence[Op]) -> tuple[int, int]:
    """(change in sections, change in bytes) that applying ``ops`` would make. Unknown ids are
    ignored here: applying the delta rejects them, and then nothing changes anyway."""
    dn = db = 0
    for op in ops:
        if op.op == "append":
            dn += len(op.sections)
            db += sections_bytes(op.sections)
        elif op.op == "replace":
            for s in op.sections:
                old = ctx.get(s.id)
                db += section_bytes(s) - (section_bytes(old) if old is not None else 0)
        else:
            for sid in op.ids:
                old = ctx.get(sid)
                if old is not None:
                    dn -= 1
                    db -= section_bytes(old)
    return dn, db


def check_delta(cfg: LimitConfig, state: Session, ops: Sequence[Op], all_bytes: int, ref: int | None) -> int:
    """Check a DELTA before it is applied; returns the agent's byte count once it is."""
    dn, db = delta_effect(state.ctx, ops)
    if dn <= 0 and db <= 0:
        return state.nbytes + db  # shrinking (or neutral) is always allowed
    nbytes = state.nbytes + db
    others = all_bytes - held_bytes(state)
    check_size(cfg, "DELTA", state.agent, len(state.ctx) + dn, nbytes, others, ref)
    return nbytes
