"""COMPRESS: a reader (a Claude Code hook) hands the daemon a large text — a tool output — and gets
its digest back; the original is archived first, under the agent and session, and stays
recallable (RECALL, ``compactd mcp``) like the originals of any applied proposal.

The digest is deterministic (the summarizer without its model, in the digest worker process): a
hook waits for it, and the model is the compaction jobs'. The archive entry is recorded as an
applied (acked) proposal that replaced one section, so a restart keeps it and the retention policy
treats it like any other.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, Protocol

from ipc.protocol import CompressRequest, Proposal, T
from ipc.sections import Section
from summarizer.digest import Item, Summarizer
from watcher.observe import logs
from watcher.serve.scheduler import FairScheduler
from watcher.store.store import Store

log = logs.get("compactd.compress")

MIN_TOKENS: Final = 2000  # smaller texts come back as they are
TARGET_SHARE: Final = 0.2  # default digest size: this share of the text ...
TARGET_MAX: Final = 1500  # ... at most this many tokens


class Host(Protocol):
    store: Store
    summarizer: Summarizer
    scheduler: FairScheduler

    def send(self, peer: bytes, msg: dict[str, Any], *, quiet: bool = False) -> None: ...


async def compress(
    host: Host, agent: str, session: str, req: CompressRequest, ref: int | None
) -> dict[str, Any]:
    """The COMPRESSED reply: the digest of ``req.text``, its original archived (durable) first."""
    count = host.summarizer.count
    tokens = count(req.text)
    min_tokens = req.min_tokens or MIN_TOKENS
    if tokens < min_tokens:
        return _as_is(req, tokens, ref)
    sid, archive, digest_id, pid = host.store.ids.take("compactd-t", "a", "compactd-d", "p")
    original = Section(
        sid,
        "tool_result",
        req.text,
        req.label or "tool",
        tokens,
        "low",
        meta={"label": req.label} if req.label else {},
    )
    rows = await asyncio.to_thread(_rows, original)
    host.store.archive.put(agent, session, archive, (original,), rows)
    target = req.target_tokens or max(64, min(TARGET_MAX, int(tokens * TARGET_SHARE)))
    deterministic = host.scheduler.pool.summarizer(host.summarizer)  # in the worker, off the loop
    digest = await deterministic.digest([Item(sid, "tool_result", req.text, tokens)], archive, target)
    if digest.tokens >= tokens:  # nothing saved: the text as it is, and no archive entry
        host.store.archive.drop_unproposed(agent, archive)
        return _as_is(req, tokens, ref)
    section = Section(
        digest_id,
        "digest",
        digest.text,
        "user",
        digest.tokens,
        "high",
        meta={"archive": archive, "method": digest.method, "sections": "1"},
    )
    proposal = Proposal(pid, 0, (sid,), (section,), tokens, digest.tokens, 0, (archive,))
    host.store.proposals.record(agent, session, proposal, digest.method)
    host.store.proposals.transition(agent, proposal.proposal, "sent")
    host.store.proposals.transition(agent, proposal.proposal, "acked", reason="compressed for a reader")
    log.info("compressed", agent=agent, archive=archive, tokens_before=tokens, tokens_after=digest.tokens)
    return {
        "t": T.COMPRESSED,
        "re": ref,
        "compressed": True,
        "text": digest.text,
        "ref": archive,
        "section": sid,
        "digest": section.id,
        "tokens_before": tokens,
        "tokens_after": digest.tokens,
        "method": digest.method,
    }


def _as_is(req: CompressRequest, tokens: int, ref: int | None) -> dict[str, Any]:
    """The reply for a text that stays as it is (too small, or its digest saved nothing)."""
    return {
        "t": T.COMPRESSED,
        "re": ref,
        "compressed": False,
        "text": req.text,
        "tokens_before": tokens,
        "tokens_after": tokens,
    }


def _rows(original: Section) -> Any:
    from watcher.store.codec import archive_rows

    return archive_rows((original,))
