"""AgentLink: the asyncio client an agent embeds to attach to compactd.

    async with AgentLink("ipc:///run/compactd/agents.sock", agent="coder-1", budget=128_000) as link:
        await link.append(Section("m1", "user", "Fix the failing test"))
        ...
        proposal = await link.proposals.get()      # compaction offers arrive on their own
        if await link.apply(proposal):              # ACKs, or NACKs a stale one
            messages = render(link.context)         # the agent's context, now smaller

The link keeps the agent's context (``link.context``) in step with the daemon's mirror: every
change is sent as an O(change) DELTA, and a RESYNC from the daemon is answered with a SNAPSHOT.
It heartbeats when idle (the daemon expires silent agents), attaches again by itself when the
daemon no longer knows it (restart, expiry), and never blocks the agent: when the daemon cannot
keep up, changes are coalesced into one SNAPSHOT instead of queueing without bound.
"""

from __future__ import annotations

from types import TracebackType

from ipc.mirror import Target
from ipc.session import LinkSession
from ipc.transport import LinkError

__all__ = ["AgentLink", "LinkError", "Target"]


class AgentLink(LinkSession):
    """The public facade: no logic of its own. It is the union of the link's parts, one concern each:
    ipc.transport (socket, requests and replies, the reader task), ipc.mirror (the context, DELTA /
    SNAPSHOT, ACK / NACK), ipc.requests (archive, checkpoints, status), ipc.session (attach,
    heartbeat, re-attach, dispatch, close; the constructor's arguments)."""

    async def __aenter__(self) -> AgentLink:
        await self.connect()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
