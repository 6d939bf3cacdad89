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
    # the model's scores of this section's lines, read ahead of the digest (Summarizer.read_ahead:
    # (line, self-information) of the lines it would rank); () = read, nothing to rank; None = not read
    ranks: Ranks | None = None


Ranks = tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Gist:
    ids: tuple[str, ...]  # the prose sections this gist stands for
    text: str
