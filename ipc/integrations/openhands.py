"""OpenHands SDK (``openhands-sdk``): compactd as the agent's condenser.

    link = SyncAgentLink(endpoint, agent="coder-1", budget=128_000)
    link.connect()
    agent = Agent(llm=llm, tools=tools, condenser=CompactdCondenser(link))

:class:`CompactdCondenser` is a ``RollingCondenser``. Before each LLM call the agent hands it the
conversation's ``View``: the events it has not seen yet go to the daemon as one DELTA, and when a
proposal has arrived it answers with a ``Condensation(forgotten_event_ids, summary,
summary_offset)`` built from it — the replaced events are forgotten, the digest (which names its
archive reference: recall the originals through ``compactd mcp``) becomes the summary, inserted where
they were. One proposal per ``Condensation`` (the agent applies it and asks again at once, without an
LLM call in between); a proposal is refused (NACK) unless both ends of what it replaces are among the
view's manipulation indices (tool call batches, call/result pairs and thinking tool loops stay whole)
and it keeps the system prompt. Nothing is ever awaited from the daemon: no proposal ready, the
view goes to the LLM as it is.

``openhands-sdk`` requires Python >= 3.12 (``pip install 'compactd[openhands]'`` there); the rest of
compactd runs on 3.11. The link is not part of the condenser's serialized form: a conversation
restored from disk without one passes its view through unchanged (attach a new condenser to
compact again).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from openhands.sdk.context.condenser.base import CondensationRequirement, RollingCondenser
from openhands.sdk.context.view import View
from openhands.sdk.event import Condensation, CondensationSummaryEvent, LLMConvertibleEvent, SystemPromptEvent
from openhands.sdk.llm import LLM, TextContent
from pydantic import PrivateAttr

from ipc.integrations.core import Applied, Mirror
from ipc.mirror import Target
from ipc.protocol import Proposal
from ipc.sections import Section
from ipc.sync import SyncAgentLink

__all__ = ["CompactdCondenser", "to_openai"]


def to_openai(event: LLMConvertibleEvent) -> dict[str, Any]:
    """One view event as the OpenAI chat message the transcript reads (``to_llm_message``: the
    message the agent itself sends for it; an ActionEvent is an assistant message with its call)."""
    msg = event.to_llm_message()
    text = "\n".join(c.text if isinstance(c, TextContent) else f"[{c.type}]" for c in msg.content)
    out: dict[str, Any] = {"role": msg.role, "content": text}
    if msg.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "function": {"name": c.name, "arguments": c.arguments}} for c in msg.tool_calls
        ]
    if msg.role == "tool":
        out["tool_call_id"] = msg.tool_call_id
    return out


def _same_event(a: LLMConvertibleEvent, b: LLMConvertibleEvent) -> bool:
    return a is b or a.id == b.id  # a summary event is made anew (new timestamp) each time it is read


class _ViewMirror(Mirror[LLMConvertibleEvent]):
    """The Mirror of a View: proposals are taken one at a time and must cut the view at its
    manipulation indices (checked on the link's loop while the agent's thread waits for it)."""

    def __init__(self, link: SyncAgentLink, **kwargs: Any) -> None:
        super().__init__(link, to_openai=to_openai, digest=self._summary_for, same=_same_event, **kwargs)
        self.one_at_a_time = True
        self._view: list[LLMConvertibleEvent] = []
        self._summary: CondensationSummaryEvent | None = None

    def _summary_for(self, section: Section) -> LLMConvertibleEvent:
        assert self._summary is not None
        return self._summary

    def target(self) -> Target:
        return _Cut(self)

    def step(self, view: View) -> Condensation | None:
        """Mirror what is new in ``view``; a Condensation when a proposal was applied."""
        assert isinstance(self.link, SyncAgentLink)
        t0 = time.perf_counter()
        events = view.events
        self._view = events
        applied = self._sync_step(self.link, self._new(events))
        cond = None
        if applied:
            a = applied[0]
            gone = {self._objs[sid].id for sid in a.replaced}
            start = next(i for i, e in enumerate(events) if e.id in gone)
            cond = Condensation(
                forgotten_event_ids=gone,
                summary="\n\n".join(d.text for d in a.digest),
                summary_offset=start,
                llm_response_id=a.proposal,
            )
            self._summary = cond.summary_event
            self._apply(applied)
            events = cond.apply(events)  # the view the agent will show us next
        self._n, self._last = len(events), (events[-1] if events else None)
        if self._keep:
            self.stats.step_s.append(time.perf_counter() - t0)
        self._view = []
        return cond


class _Cut:
    """The transcript's checks, and: the replaced events are one run of the view whose both ends
    are manipulation indices, not the system prompt, and no digest is cut in two."""

    def __init__(self, mirror: _ViewMirror) -> None:
        self.mirror = mirror

    def check(self, proposal: Proposal) -> str:
        m = self.mirror
        why = m.transcript.check(proposal)
        if why:
            return why
        gone = {m._objs[sid].id for sid in proposal.replaces}
        if any(e.id in gone for sid, e in m._objs.items() if sid not in proposal.replaces):
            return "would cut an earlier digest in two"
        where = [i for i, e in enumerate(m._view) if e.id in gone]
        if len(where) != len(gone) or where[-1] - where[0] + 1 != len(where):
            return "the replaced events are not one run of the view"
        if any(isinstance(m._view[i], SystemPromptEvent) for i in where):
            return "would forget the system prompt"
        cuts = View(events=m._view).manipulation_indices
        if where[0] not in cuts or where[-1] + 1 not in cuts:
            return f"events {where[0]}..{where[-1]} do not end at the view's manipulation indices"
        return ""

    def apply(self, proposal: Proposal) -> None:
        self.mirror.transcript.apply(proposal)


class CompactdCondenser(RollingCondenser):
    """Applies the digests compactd has already prepared as ``Condensation`` events; never waits."""

    _mirror: _ViewMirror | None = PrivateAttr(default=None)
    _pending: Condensation | None = PrivateAttr(default=None)

    def __init__(
        self,
        link: SyncAgentLink | None = None,
        *,
        count: Callable[[str], int] | None = None,
        on_apply: Callable[[Applied], None] | None = None,
        **data: Any,
    ) -> None:
        super().__init__(**data)
        if link is not None:
            self._mirror = _ViewMirror(link, count=count, on_apply=on_apply)

    @property
    def mirror(self) -> _ViewMirror | None:
        """The mirror of the view (its ``stats``: calls, applied, refused, the adapter's time)."""
        return self._mirror

    def condensation_requirement(
        self, view: View, agent_llm: LLM | None = None
    ) -> CondensationRequirement | None:
        self._pending = self._mirror.step(view) if self._mirror is not None else None
        return CondensationRequirement.SOFT if self._pending is not None else None

    def get_condensation(self, view: View, agent_llm: LLM | None = None) -> Condensation:
        cond, self._pending = self._pending, None
        assert cond is not None, "get_condensation without a ready proposal"
        return cond

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> CompactdCondenser:
        return self  # the link (a thread, a socket) is shared, never copied
