"""One conversation seen through the proxy: its messages as sections of one daemon agent, the
proposals the daemon sent for it, and the messages each upstream request carries.

The agent keeps sending its own full history; the proxy keeps, per message, the section id it
got, and builds each upstream request from ``transcript.ids``: an original message's raw bytes
from the current request, or an applied digest's message bytes (encoded once, so the same history
always yields the same bytes). Everything here runs without waiting on the daemon: sections go out
with non-blocking sends, proposals are taken from the link's queue if they are there."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ipc.adapters import DIGEST_MARK, AdapterError, Transcript
from ipc.client import AgentLink, LinkError
from ipc.protocol import Proposal, T
from ipc.proxy import fit, rules, wire
from ipc.recalled import PAGE_BYTES, render_items
from ipc.sections import Section

log = logging.getLogger("compactd.proxy")
RETRY_CONNECT_S = 5.0


@dataclass(frozen=True)
class LinkSettings:
    endpoint: str
    count: Callable[[str], int]
    policy: rules.CachePolicy = field(default_factory=rules.CachePolicy)
    reserve: float | None = None
    timeout_s: float = 5.0
    recall_tool: bool = False


@dataclass
class Prepared:
    """What one request became: the upstream body (None = the original bytes) and its numbers."""

    body: bytes | None
    messages: int = 0
    new: int = 0
    tokens_in: int = 0  # estimated tokens of the agent's messages
    tokens_out: int = 0  # ... of what goes upstream
    digests: int = 0  # digest messages in the upstream request
    applied: list[str] = field(default_factory=list)  # proposals applied at this request (why)
    elided: int = 0  # messages left out of the upstream request (fit.py), this request's total
    kept: int = 0
    cacheable: int = 0


def system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return ""


class Conversation:
    def __init__(
        self, name: str, api: wire.Api, system: msgspec.Raw | None, window: int, settings: LinkSettings
    ) -> None:
        self.name, self.api, self.window, self.settings = name, api, window, settings
        decoded = wire.decode_message(system) if system is not None else None
        text = system_text(decoded) if api == "anthropic" and decoded else None
        self.transcript = Transcript(api, system=text, count=settings.count)
        self.system_tokens = self.transcript.system.tokens if self.transcript.system else 0
        self.chain: list[bytes] = []
        self.index_of: dict[str, int] = {}  # section id -> message index in the agent's requests
        self.kinds: dict[str, str] = {}
        self.groups: dict[str, str] = {}  # section id -> tool group ("" for none)
        self.tokens: dict[str, int] = {}
        self.digests: dict[str, bytes] = {}  # digest section id -> its message, encoded
        self.orig_tokens = 0
        self.raw: list[msgspec.Raw] = []  # the latest request's messages
        self.previous: list[rules.Entry] = []  # the previous upstream request (the cached prefix)
        self.wire: list[str] = []  # the section ids of the upstream request's messages, in order
        self.acked: list[Proposal] = []  # ACKed (the daemon's mirror has them), not yet on the wire
        self.elided: list[str] = []  # wire ids left out of upstream requests (fit.py), in order
        self.elision = b""  # the note message standing for them, encoded once per cut
        self.elision_key = ""
        self.stats = rules.CacheStats()
        self.link: AgentLink | None = None
        self.broken = ""  # why it is no longer mirrored (requests then go upstream unchanged)
        self.last_used = time.monotonic()
        self._connecting: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None
        self._next_try = 0.0
        self._bust_reason = ""

    # --- the daemon link (never awaited by a request) --------------------------------------------
    def ensure_link(self) -> None:
        if self.link is not None or self.broken or time.monotonic() < self._next_try:
            return
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.create_task(self._connect(), name=f"proxy-link-{self.name}")

    async def _connect(self) -> None:
        s = self.settings
        link = AgentLink(s.endpoint, self.name, self.window, reserve=s.reserve, timeout_s=s.timeout_s)
        try:
            await link.connect()
        except (LinkError, OSError) as exc:
            self._next_try = time.monotonic() + RETRY_CONNECT_S
            log.warning("daemon_unreachable conversation=%s error=%s", self.name, exc)
            return
        self.link = link  # from here on requests append; the snapshot below is sent before any
        try:
            await link.snapshot(self.transcript.sections())
        except LinkError as exc:
            self._lose(f"snapshot refused: {exc}")

    def _lose(self, why: str) -> None:
        """Stop mirroring (requests go upstream unchanged from now on) and let the daemon go."""
        self.broken = why
        log.warning("conversation_unmirrored conversation=%s reason=%s", self.name, why)
        if self.link is not None:
            self._closing = asyncio.create_task(self.close(), name=f"proxy-unlink-{self.name}")

    async def close(self) -> None:
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connecting
        if self.link is not None:
            with contextlib.suppress(LinkError, OSError):
                await self.link.close()
            self.link = None

    # --- a request ---------------------------------------------------------------------------------
    async def prepare(self, req: wire.ChatRequest, chain: list[bytes], start: int) -> Prepared:
        self.last_used = time.monotonic()
        self.raw = req.messages
        new = req.messages[start:]
        if self.broken:
            return Prepared(None, len(req.messages), len(new))
        try:
            sections = self.transcript.add(*(wire.decode_message(m) for m in new))
        except (AdapterError, msgspec.DecodeError) as exc:
            self._lose(f"message not understood: {exc}")
            return Prepared(None, len(req.messages), len(new))
        self.chain = chain
        for i, sec in enumerate(sections, start):
            self.wire.append(sec.id)
            self.index_of[sec.id] = i
            self.kinds[sec.id] = sec.kind
            self.groups[sec.id] = sec.group
            self.tokens[sec.id] = sec.tokens
            self.orig_tokens += sec.tokens
        self.ensure_link()
        if self.link is not None and sections:
            try:
                await self.link.append(*sections)
            except LinkError as exc:
                self._lose(f"the daemon refused the messages: {exc}")
                total = self.orig_tokens + self.system_tokens
                return Prepared(None, len(req.messages), len(new), total, total)
        self._bust_reason = ""
        applied = await self._take_proposals()
        if self._fit():
            applied.append("elided")
        return self._build(req, len(new), applied)

    def _view(self) -> list[str]:
        """The upstream request's message keys: the wire, the elided run as its one note."""
        if not self.elided:
            return self.wire
        gone, out = set(self.elided), []
        for sid in self.wire:
            if sid not in gone:
                out.append(sid)
            elif self.elision_key not in out:
                out.append(self.elision_key)
        return out

    def _entries(self) -> list[rules.Entry]:
        head = [("system", self.system_tokens)] if self.system_tokens else []
        return head + [(sid, self.tokens[sid]) for sid in self._view()]

    def _movable(self, sid: str) -> bool:
        if sid == self.wire[-1] or self.kinds.get(sid) == "system":
            return False
        i = self.index_of.get(sid)
        return i is None or i >= len(self.raw) or b'"cache_control"' not in bytes(self.raw[i])

    def _fit(self) -> bool:
        """Elide the oldest messages when the request, with every ready digest on the wire, still
        reaches ``apply_at`` of the window: down to ``elide_to`` of it (fit.py). True if cut."""
        policy = self.settings.policy
        total = sum(t for _, t in self._entries())
        if total < policy.apply_at * self.window:
            return False
        need = total - int(policy.elide_to * self.window) + fit.NOTE_TOKENS
        start = self.wire.index(self.elided[-1]) + 1 if self.elided else fit.head_end(self.wire, self._kind)
        end = fit.extend(self.wire, start, need, self.tokens.__getitem__, self._group, self._movable)
        if end == start:
            return False  # nothing may go (a cache_control marker, a huge latest message): as it is
        self.elided += self.wire[start:end]
        self._cut(f"elided to fit the window ({total} tokens of {self.window})")
        return True

    def _cut(self, reason: str) -> None:
        """Encode the note for the elided run (once per cut: the same cut, the same bytes)."""
        tokens = sum(self.tokens[s] for s in self.elided)
        text = fit.note(self.elided, tokens, self.settings.recall_tool)
        self.elision = wire.digest_message(self.api, text)
        self.elision_key = f"{fit.ELISION_KEY}:{self.elided[0]}..{self.elided[-1]}:{len(self.elided)}"
        self.tokens[self.elision_key] = self.settings.count(text)
        self._bust_reason = reason
        log.info(
            "elided conversation=%s messages=%d tokens=%d reason=%s",
            self.name,
            len(self.elided),
            tokens,
            reason,
        )

    def _kind(self, sid: str) -> str:
        return self.kinds.get(sid, "")

    def _group(self, sid: str) -> str:
        return self.groups.get(sid, "")

    async def _take_proposals(self) -> list[str]:
        """ACK what the daemon proposed (its mirror shrinks at once, so it plans the next one from
        there), then put ACKed digests on the wire, oldest first, as the cache rules allow."""
        link = self.link
        if link is None:
            return []
        while not link.proposals.empty():
            p = link.proposals.get_nowait()
            why = self.check(p)
            if why:  # AgentLink.apply NACKs it (stale or rejected) and says why
                log.info("proposal_refused conversation=%s proposal=%s reason=%s", self.name, p.proposal, why)
            if await link.apply(p, onto=self):
                self.acked.append(p)
        if not self.acked:
            return []
        applied: list[str] = []
        while self.acked and rules.busted_tokens(self.previous, self.acked[0].replaces[0]) == 0:
            self._wire(self.acked.pop(0))  # never sent upstream as it is: nothing to bust
            applied.append("free")
        if self.acked:
            tokens = sum(t for _, t in self._entries())
            busted = rules.busted_tokens(self.previous, self.acked[0].replaces[0])
            saving = sum(p.tokens_before - p.tokens_after for p in self.acked)
            verdict = rules.decide(self.settings.policy, saving, busted, tokens, self.window)
            if verdict:  # all at once: one cache miss for all of them
                self._bust_reason = f"digest applied ({verdict})"
                while self.acked:
                    self._wire(self.acked.pop(0))
                    applied.append(verdict)
        return applied

    def _wire(self, p: Proposal) -> None:
        start = self.wire.index(p.replaces[0])
        stop = start + len(p.replaces)
        if self.wire[start:stop] != list(p.replaces):  # cannot happen: acked in order, on this list
            raise AdapterError(f"proposal {p.proposal} does not fit the upstream message list")
        self.wire[start:stop] = [d.id for d in p.digest]
        gone = set(self.elided)
        if gone & set(p.replaces):  # a digest of elided messages stays elided (the note's bytes stay)
            inside = gone.issuperset(p.replaces)
            gone = (gone - set(p.replaces)) | ({d.id for d in p.digest} if inside else set())
            self.elided = [s for s in self.wire if s in gone]

    def _build(self, req: wire.ChatRequest, new: int, applied: list[str]) -> Prepared:
        entries = self._entries()
        kept, cacheable = (0, 0)
        if self.previous:
            kept, cacheable = self.stats.record(self.previous, entries, self._bust_reason)
        self.previous = entries
        view = self._view()
        digests = sum(1 for sid in view if sid in self.digests)
        body = None
        if digests or self.elided:
            out = [self._message(s) for s in view]
            body = wire.rebuild(req, out)
        return Prepared(
            body,
            len(req.messages),
            new,
            self.orig_tokens + self.system_tokens,
            sum(t for _, t in entries),
            digests,
            applied,
            len(self.elided),
            kept,
            cacheable,
        )

    def _message(self, sid: str) -> msgspec.Raw | bytes:
        if sid == self.elision_key:
            return self.elision
        return self.digests[sid] if sid in self.digests else self.raw[self.index_of[sid]]

    # --- the recall tool (recall.py) ---------------------------------------------------------------
    async def recall_text(self, ref: str) -> str:
        """What compactd_recall answers for ``ref``: a message the agent still sends (an elided
        one) from the proxy's copy, else the daemon's archive, in this conversation's scope."""
        base, _, only = ref.partition("#")
        sec = self.transcript.section(base)
        if sec is not None and base not in self.digests:
            return f"--- {sec.id} [{sec.kind} {sec.role}]\n{sec.text}"
        if self.link is None:
            return f"compactd cannot recall {ref!r} now: its daemon is not attached"
        what = {"refs": [base]} if re.fullmatch(r"a\d+", base) else {"sections": [base]}
        try:
            reply = await self.link.request({"t": T.RECALL, **what, "max_bytes": PAGE_BYTES})
        except LinkError as exc:
            return f"compactd has nothing under {ref!r}: {exc}"
        return render_items(reply, only) or f"compactd has nothing under {ref!r}"

    # --- proposals onto the message list (ipc.client.Target) -------------------------------------
    def check(self, proposal: Proposal) -> str:
        why = self.transcript.check(proposal)
        if why:
            return why
        if self.wire and self.wire[-1] in proposal.replaces:
            return "the latest message stays verbatim"
        for sid in proposal.replaces:
            if self.kinds.get(sid) == "system":
                return "the system prompt stays verbatim"
            i = self.index_of.get(sid)
            if i is not None and i < len(self.raw) and b'"cache_control"' in bytes(self.raw[i]):
                return f"message {i} carries a cache_control marker"
        return ""

    def apply(self, proposal: Proposal) -> None:
        self.transcript.apply(proposal)
        for d in proposal.digest:
            self.digests[d.id] = wire.digest_message(self.api, _digest_text(d))
            self.tokens[d.id] = d.tokens or self.settings.count(d.text)
            self.kinds[d.id] = "digest"


def _digest_text(d: Section) -> str:
    return d.text if d.text.startswith("[compactd digest") else f"{DIGEST_MARK} {d.text}"
