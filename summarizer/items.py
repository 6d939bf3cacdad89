"""What a digest is made of: the sections of a region and the model's gists of its prose."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    """One section of a region, as the summarizer sees it (no dependency on the wire format)."""

    id: str
    kind: str
    text: str
    tokens: int


@dataclass(frozen=True)
class Gist:
    ids: tuple[str, ...]  # the prose sections this gist stands for
    text: str
