"""Conversation identity without the agent's cooperation: a request continues a conversation when
its messages start with that conversation's messages.

Each message gets a key: the hash of its canonical JSON (keys sorted, ``cache_control`` markers
left out, since clients move them from turn to turn; a string content as its one text block).
Keys are chained (``h_i = H(h_{i-1}, key_i)``, rooted in the API and the system prompt), and the
index maps every chain hash to the conversation and position it ends at. A request's longest
chain hash found in the index names its conversation. The agent only ever sends its own messages,
never the proxy's digests, so identity is by the original history: the proxy's substitutions
cannot change it.

Hashing the raw bytes first (and remembering raw hash -> canonical key) means a message already
seen costs one blake2b pass, not a JSON decode."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import msgspec

from ipc.proxy.wire import decode_message

_SORTED = msgspec.json.Encoder(order="sorted")
_DIGEST = 16
C = TypeVar("C")


def _h(*parts: bytes | memoryview | msgspec.Raw) -> bytes:
    h = hashlib.blake2b(digest_size=_DIGEST)
    for p in parts:
        h.update(p)
    return h.digest()


def _strip(obj: Any) -> Any:
    """``obj`` without cache_control markers (on the message and its content blocks), and with a
    string content as the one text block it means (clients send either, and both APIs read them
    alike; Claude Code turns the last message's string into a block to mark it)."""
    if isinstance(obj, dict):
        return {
            k: _strip([{"type": "text", "text": v}] if k == "content" and isinstance(v, str) else v)
            for k, v in obj.items()
            if k != "cache_control"
        }
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def canonical_key(obj: Any) -> bytes:
    return _h(_SORTED.encode(_strip(obj)))


class Keys:
    """Message keys, with a bounded memo of raw-bytes hash -> canonical key."""

    def __init__(self, memo: int = 200_000) -> None:
        self._memo: OrderedDict[bytes, bytes] = OrderedDict()
        self._size = memo
        self.decoded = 0  # messages decoded (the rest were known by their bytes)

    def key(self, raw: msgspec.Raw | bytes) -> bytes:
        rh = _h(raw)
        key = self._memo.get(rh)
        if key is None:
            key = canonical_key(decode_message(raw))
            self.decoded += 1
            self._memo[rh] = key
            if len(self._memo) > self._size:
                self._memo.popitem(last=False)
        return key

    def chain(self, root: bytes, messages: Sequence[msgspec.Raw | bytes]) -> list[bytes]:
        out, h = [], root
        for raw in messages:
            h = _h(h, self.key(raw))
            out.append(h)
        return out

    def root(self, api: str, system: msgspec.Raw | None) -> bytes:
        """The chain's root: the API and the (Anthropic) system prompt; OpenAI's is a message."""
        return _h(api.encode(), b"\0", self.key(system) if system is not None else b"")


class Index(Generic[C]):
    """Chain hash -> (conversation, messages it covers)."""

    def __init__(self) -> None:
        self._at: dict[bytes, tuple[C, int]] = {}

    def find(self, chain: Sequence[bytes]) -> tuple[C, int] | None:
        """The conversation the longest known prefix of ``chain`` belongs to, and that length."""
        for i in range(len(chain) - 1, -1, -1):
            hit = self._at.get(chain[i])
            if hit is not None:
                return hit[0], i + 1
        return None

    def add(self, conv: C, chain: Sequence[bytes], start: int) -> None:
        for i in range(start, len(chain)):
            self._at[chain[i]] = (conv, i + 1)

    def drop(self, conv: C, chain: Sequence[bytes]) -> None:
        for h in chain:
            if self._at.get(h, (None, 0))[0] is conv:
                del self._at[h]
