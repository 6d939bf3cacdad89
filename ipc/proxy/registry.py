"""All conversations of a proxy: identity lookup, creation, forks, and eviction of idle ones."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator

from ipc.proxy import identity, rules, wire
from ipc.proxy.conversation import Conversation, LinkSettings, Prepared
from ipc.proxy.windows import Windows


class Conversations:
    def __init__(
        self, settings: LinkSettings, windows: Windows, *, limit: int = 256, idle_s: float = 3600.0
    ) -> None:
        self.settings, self.windows, self.limit, self.idle_s = settings, windows, limit, idle_s
        self.keys = identity.Keys()
        self.index: identity.Index[Conversation] = identity.Index()
        self.live: dict[str, Conversation] = {}
        self.forks = 0
        self._seq = itertools.count(1)
        self._closing: set[asyncio.Task[None]] = set()

    def __iter__(self) -> Iterator[Conversation]:
        return iter(list(self.live.values()))

    async def prepare(self, req: wire.ChatRequest) -> tuple[Conversation | None, Prepared]:
        if not req.messages:
            return None, Prepared(None)
        root = self.keys.root(req.api, req.system)
        chain = self._continued(root, req)
        if chain is None:
            chain = self.keys.chain(root, req.messages)
        hit = self.index.find(chain)
        if hit is not None and hit[1] == len(hit[0].chain) and hit[0].name in self.live:
            conv, start = hit
        else:
            if hit is not None:
                self.forks += 1  # an edited or regenerated turn: a conversation of its own
            conv, start = self._new(req, chain), 0
        self.index.add(conv, chain, start)
        prepared = await conv.prepare(req, chain, start)
        self._evict()
        return conv, prepared

    def _continued(self, root: bytes, req: wire.ChatRequest) -> list[bytes] | None:
        """The fast path: the request repeats, byte for byte, the messages of the conversation its
        first message belongs to, and appends some; only the new ones are hashed."""
        hit = self.index.find(self.keys.chain(root, req.messages[:1]))
        if hit is None:
            return None
        conv = hit[0]
        known, msgs, prev = len(conv.chain), req.messages, conv.raw
        if not known or len(msgs) < known or len(prev) < known:
            return None
        for i in range(known):
            if msgs[i] != prev[i]:
                return None
        return conv.chain + self.keys.chain(conv.chain[-1], msgs[known:])

    def _new(self, req: wire.ChatRequest, chain: list[bytes]) -> Conversation:
        name = f"proxy-{chain[0].hex()[:10]}-{next(self._seq)}"
        conv = Conversation(name, req.api, req.system, self.windows(req.model), self.settings)
        self.live[name] = conv
        return conv

    def _evict(self) -> None:
        now = time.monotonic()
        idle = [c for c in self.live.values() if now - c.last_used > self.idle_s]
        by_age = sorted(self.live.values(), key=lambda c: c.last_used)
        over = by_age[: max(0, len(self.live) - self.limit)]
        for conv in {c.name: c for c in idle + over}.values():
            del self.live[conv.name]
            self.index.drop(conv, conv.chain)
            task = asyncio.create_task(conv.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def cache(self) -> rules.CacheStats:
        """The cache figures of all live conversations together."""
        total = rules.CacheStats()
        for c in self.live.values():
            total.requests += c.stats.requests
            total.cacheable_tokens += c.stats.cacheable_tokens
            total.kept_tokens += c.stats.kept_tokens
            total.busts.update(c.stats.busts)
        return total

    async def close(self) -> None:
        convs = list(self.live.values())
        self.live.clear()
        await asyncio.gather(*(c.close() for c in convs), *self._closing, return_exceptions=True)
