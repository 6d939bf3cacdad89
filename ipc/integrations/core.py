"""The part every framework adapter shares: mirror a framework's message list into compactd and
apply the digests the daemon has *already* prepared — never wait for one.

A :class:`Mirror` holds the framework's own message objects by section id, an
:class:`ipc.Transcript` (OpenAI flavor) that knows which messages form a tool call and its results,
and the link. Each model call costs one hop to the link's loop: the new messages go out as one
DELTA, proposals that have arrived meanwhile are applied (ACK) or refused (NACK: stale, or it would
split a tool call from its result), and nothing is awaited from the daemon.

Two ways to use it, by what the framework lets an adapter change:

* ``rewrite(messages)`` — the framework keeps its full history and only the request to the model is
  rewritten (LangChain ``wrap_model_call``, Agents SDK ``call_model_input_filter``, the
  mini-swe-agent model class). The same history always gives the same request, so the provider's
  prompt cache holds between two compactions.
* ``compact(messages)`` — the framework's own history is replaced by the compacted one (LangChain
  ``before_model``, the Agents SDK session, the mini-swe-agent agent subclass). ``applied`` tells
  which messages were replaced by which digest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ipc.adapters import AdapterError, Transcript
from ipc.client import AgentLink
from ipc.mirror import Target
from ipc.protocol import Proposal
from ipc.sections import Section
from ipc.sync import SyncAgentLink

M = TypeVar("M")


@dataclass
class Applied:
    """One proposal applied to the message list: the section ids it replaced, the digests."""

    proposal: str
    replaced: tuple[str, ...]
    digest: tuple[Section, ...]
    messages: tuple[Any, ...] = ()  # the framework's messages it replaced

    @property
    def archive(self) -> list[str]:
        """The archive references of the originals (recall them: ``compactd mcp``, link.recall)."""
        return [d.meta["archive"] for d in self.digest if d.meta.get("archive")]


@dataclass
class Stats:
    calls: int = 0
    applied: int = 0
    refused: int = 0  # NACKed: stale, or it would split a tool call from its result
    resets: int = 0  # the framework changed history behind the adapter: a SNAPSHOT was sent
    step_s: list[float] = field(default_factory=list)  # the adapter's own time per model call


class Mirror(Generic[M]):
    """``to_openai(message)`` renders one framework message as an OpenAI chat message (what the
    transcript reads: role, content, tool_calls, tool_call_id); ``digest(section)`` builds the
    framework message that stands for a digest."""

    def __init__(
        self,
        link: SyncAgentLink | AgentLink,
        *,
        to_openai: Callable[[M], Mapping[str, Any]],
        digest: Callable[[Section], M],
        count: Callable[[str], int] | None = None,
        keep_stats: bool = True,
        on_apply: Callable[[Applied], None] | None = None,
        same: Callable[[M, M], bool] | None = None,
    ) -> None:
        self.link = link
        self._to_openai = to_openai
        self._digest = digest
        self._count = count
        self.transcript = Transcript("openai", count=count)
        self._objs: dict[str, M] = {}
        self._n = 0  # how many of the framework's messages are mirrored
        self._last: M | None = None  # the last of them (to notice a history changed behind us)
        self.stats = Stats()
        self._keep = keep_stats
        self.on_apply = on_apply  # called for each proposal applied (after the list changed)
        self.disabled = ""  # why the adapter passes messages through unchanged ("" = it does not)
        self.last_applied: list[Applied] = []
        self._same: Callable[[Any, Any], bool] = same or _same  # is the mirrored message still there?
        self.one_at_a_time = False  # take at most one proposal per model call (OpenHands: one Condensation)

    # --- the two uses ------------------------------------------------------------------------------
    def rewrite(self, messages: Sequence[M]) -> list[M]:
        """The request to send instead of ``messages`` (the framework's full history)."""
        if not isinstance(self.link, SyncAgentLink):
            raise TypeError("rewrite() needs a SyncAgentLink; use arewrite() with an AgentLink")
        t0 = time.perf_counter()
        self._apply(self._sync_step(self.link, self._new(messages)))
        self._n, self._last = len(messages), (messages[-1] if messages else None)
        return self._done(t0, messages)

    def compact(self, messages: Sequence[M]) -> list[M]:
        """The compacted history that replaces ``messages`` in the framework's state."""
        if not isinstance(self.link, SyncAgentLink):
            raise TypeError("compact() needs a SyncAgentLink; use acompact() with an AgentLink")
        t0 = time.perf_counter()
        self._apply(self._sync_step(self.link, self._new(messages)))
        return self._settle(self._done(t0, messages))

    async def arewrite(self, messages: Sequence[M]) -> list[M]:
        link = self._async_link()
        t0 = time.perf_counter()
        self._apply(await self._step(link, self._new(messages)))
        self._n, self._last = len(messages), (messages[-1] if messages else None)
        return self._done(t0, messages)

    async def acompact(self, messages: Sequence[M]) -> list[M]:
        link = self._async_link()
        t0 = time.perf_counter()
        self._apply(await self._step(link, self._new(messages)))
        return self._settle(self._done(t0, messages))

    # --- internals ---------------------------------------------------------------------------------
    def _async_link(self) -> AgentLink:
        if not isinstance(self.link, AgentLink):
            raise TypeError("arewrite()/acompact() need an AgentLink; use rewrite()/compact()")
        return self.link

    def _new(self, messages: Sequence[M]) -> tuple[bool, list[Section]]:
        """(reset?, the sections to send): the messages beyond those mirrored, or all of them when
        the framework changed what was mirrored (its own trimming, a restored session)."""
        self.stats.calls += 1
        self.last_applied = []
        if self.disabled:
            return False, []
        n = self._n
        reset = len(messages) < n or (n > 0 and not self._same(messages[n - 1], self._last))
        if reset:
            self.transcript = Transcript("openai", count=self._count)
            self._objs = {}
            self.stats.resets += 1
            fresh = messages
        else:
            fresh = messages[n:]
        try:
            sections = self.transcript.add(*(self._to_openai(m) for m in fresh))
        except AdapterError as exc:  # a message the transcript cannot read: pass everything through
            self.disabled = f"compactd adapter off: {exc}"
            return False, []
        for sid, msg in zip(self.transcript.ids[len(self.transcript.ids) - len(fresh) :], fresh, strict=True):
            self._objs[sid] = msg
        if reset:
            return True, self.transcript.sections()
        return False, sections

    def _sync_step(self, link: SyncAgentLink, new: tuple[bool, list[Section]]) -> list[Applied]:
        """The new messages are handed to the link's loop without waiting; only when proposals
        have arrived does the caller wait for the loop (to apply them: ACK, context, transcript)."""
        if new[0] or new[1]:
            link.post(lambda alink: _send(alink, new))
        if not link.ready():
            return []
        return link.call(self._take)

    async def _step(self, link: AgentLink, new: tuple[bool, list[Section]]) -> list[Applied]:
        """Send what is new, apply what is ready. Never waits for the daemon."""
        await _send(link, new)
        return await self._take(link)

    async def _take(self, link: AgentLink) -> list[Applied]:
        applied: list[Applied] = []
        queue = link.proposals
        while not queue.empty() and not (applied and self.one_at_a_time):
            p: Proposal = queue.get_nowait()
            if await link.apply(p, onto=self.target()):
                applied.append(Applied(p.proposal, p.replaces, p.digest))
            else:
                self.stats.refused += 1
        return applied

    def target(self) -> Target:
        """What a proposal must also fit (and is applied onto) besides the link's context."""
        return self.transcript

    def _apply(self, applied: list[Applied]) -> None:
        objs = self._objs
        for a in applied:
            a.messages = tuple(objs.pop(sid) for sid in a.replaced if sid in objs)
            for sec in a.digest:
                objs[sec.id] = self._digest(sec)
            if self.on_apply is not None:
                self.on_apply(a)
        self.stats.applied += len(applied)
        self.last_applied = applied

    def _done(self, t0: float, messages: Sequence[M]) -> list[M]:
        out = list(messages) if self.disabled else [self._objs[sid] for sid in self.transcript.ids]
        if self._keep:
            self.stats.step_s.append(time.perf_counter() - t0)
        return out

    def _settle(self, view: list[M]) -> list[M]:
        self._n, self._last = len(view), (view[-1] if view else None)
        return view

    def section_id(self, message: M) -> str | None:
        """The section id a message of the current view is mirrored as (None: not mirrored)."""
        for sid, obj in self._objs.items():
            if obj is message:
                return sid
        return None


async def _send(link: AgentLink, new: tuple[bool, list[Section]]) -> None:
    reset, sections = new
    if reset:
        await link.snapshot(sections)
    elif sections:
        await link.append(*sections)


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an object whose == raises is not the same message
        return False
