"""What the store returns (frozen records) and the errors it raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ipc.protocol import Proposal
from ipc.sections import Section


class StoreError(RuntimeError):
    """The store cannot be opened or used; the message says what and what to do."""


class CorruptError(StoreError):
    """A row failed its checksum or the database failed PRAGMA integrity_check."""


class TransitionError(StoreError):
    """A proposal state change the state machine does not allow."""


@dataclass(frozen=True, slots=True)
class ArchiveEntry:
    ref: str
    agent: str
    session: str
    created: float
    sections: int
    tokens: int
    bytes: int
    evicted: float | None
    evict_reason: str
    state: str  # state of the proposal that archived it ("" if none)


@dataclass(frozen=True, slots=True)
class Recalled:
    """One archived section: which archive entry it came from and its position there."""

    ref: str
    session: str
    pos: int
    section: Section


@dataclass(frozen=True, slots=True)
class Hit:
    ref: str
    session: str
    pos: int
    section_id: str
    kind: str
    created: float
    snippet: str


@dataclass(frozen=True, slots=True)
class StoredProposal:
    proposal: Proposal
    session: str
    ref: str
    state: str
    method: str


@dataclass(frozen=True, slots=True)
class CheckpointMeta:
    name: str
    session: str
    version: int
    epoch: int
    tokens: int
    sections: int
    bytes: int
    created: float
    note: str

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "session": self.session,
            "version": self.version,
            "epoch": self.epoch,
            "tokens": self.tokens,
            "sections": self.sections,
            "bytes": self.bytes,
            "created": self.created,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class BootReport:
    expired_planned: int  # proposals whose digest never left: expired, their archive rows removed
    orphan_archives: int  # archive entries no proposal refers to (a crash during summarization)
    open_sent: int  # proposals sent before the restart: reconciled when their agent resumes


@dataclass(frozen=True, slots=True)
class Evicted:
    by_age: int
    by_size: int
    bytes: int
