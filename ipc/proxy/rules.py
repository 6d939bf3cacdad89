"""Substitution and prompt-cache rules: which proposals go onto the wire, and when.

A provider caches a request's prompt prefix; the next request reuses it as long as its first
messages are byte-identical. The proxy treats the previous upstream request of a conversation as
the cached prefix. Applying a digest busts the cache from the first replaced message on.

A proposal the daemon sends is ACKed at the next request (the daemon's mirror shrinks, so it plans
the next one from there), but put on the wire only at a request boundary where

* it busts nothing (its messages were never sent upstream as they are), or
* the saving of all ACKed digests is worth the bust: ``saving >= bust_ratio * busted`` tokens, or
* the conversation needs the room: the request would reach ``apply_at`` of the window.
  If it still does with every ready digest on the wire, the oldest messages are elided down to
  ``elide_to`` of the window (fit.py): the request always fits.

Then all ACKed digests go on the wire at once, oldest first: one cache miss for all of them. Every
bust is counted with its reason, and so are the prefix tokens kept byte-identical from one request
to the next."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

Entry = tuple[str, int]  # (message key in the upstream request, its tokens)


@dataclass(frozen=True)
class CachePolicy:
    bust_ratio: float = 1.0
    apply_at: float = 0.9  # of the window
    elide_to: float = 0.6  # the last resort (fit.py) cuts a request still at apply_at down to this

    def __post_init__(self) -> None:
        if self.bust_ratio < 0 or not 0 < self.apply_at <= 1:
            raise ValueError("bust_ratio must be >= 0 and apply_at in (0, 1]")
        if not 0 < self.elide_to < self.apply_at:
            raise ValueError("elide_to must be in (0, apply_at)")


def busted_tokens(previous: Sequence[Entry], first_replaced: str) -> int:
    """Tokens of the previous upstream request from ``first_replaced`` on (0 if it was not sent)."""
    for i, (key, _) in enumerate(previous):
        if key == first_replaced:
            return sum(t for _, t in previous[i:])
    return 0


def decide(policy: CachePolicy, saving: int, busted: int, tokens: int, window: int) -> str:
    """ "free", "worth" or "needed" to apply now; "" to wait."""
    if busted == 0:
        return "free"
    if tokens >= policy.apply_at * window:
        return "needed"
    if saving >= policy.bust_ratio * busted:
        return "worth"
    return ""


def kept_prefix(previous: Sequence[Entry], now: Sequence[Entry]) -> int:
    """Tokens of the previous request that this one repeats byte-identically from the start."""
    kept = 0
    for (a, tokens), (b, _) in zip(previous, now, strict=False):
        if a != b:
            break
        kept += tokens
    return kept


@dataclass
class CacheStats:
    """Per proxy (and per conversation): prefix tokens the provider could reuse, and busts."""

    requests: int = 0
    cacheable_tokens: int = 0  # the previous request's prompt, per continuing request
    kept_tokens: int = 0  # of those, repeated byte-identically
    busts: Counter[str] = field(default_factory=Counter)  # reason -> count

    def record(self, previous: Sequence[Entry], now: Sequence[Entry], reason: str) -> tuple[int, int]:
        self.requests += 1
        cacheable = sum(t for _, t in previous)
        kept = kept_prefix(previous, now)
        self.cacheable_tokens += cacheable
        self.kept_tokens += kept
        if kept < cacheable:
            self.busts[reason or "history changed by the client"] += 1
        return kept, cacheable

    @property
    def kept_fraction(self) -> float:
        return self.kept_tokens / self.cacheable_tokens if self.cacheable_tokens else 1.0
