"""AgentLink: the asyncio client an agent embeds to attach to compactd.

    async with AgentLink("ipc:///run/compactd/agents.sock", agent="coder-1", budget=128_000) as link:
        await link.append(Section("m1", "user", "Fix the failing test"))
        ...
        proposal = await link.proposals.get()      # compaction offers arrive on their own
        if await link.apply(proposal):              # ACKs, or NACKs a stale one
            messages = render(link.context)         # the agent's context, now smaller

The link keeps the agent's context (``link.context``) in step with the daemon's mirror: every
change is sent as an O(change) DELTA, and a RESYNC from the daemon is answered with a SNAPSHOT.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterable
from types import TracebackType
from typing import Any

import zmq
import zmq.asyncio

from ipc.context import Context
from ipc.protocol import DEFAULT_MAX_FRAME, Op, Proposal, ProtocolError, T, decode, encode
from ipc.sections import Section


class LinkError(RuntimeError):
    """The daemon refused a request or did not answer; ``code`` is the protocol error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class AgentLink:
    def __init__(
        self,
        endpoint: str,
        agent: str,
        budget: int,
        *,
        reserve: float | None = None,
        session: str = "default",
        token: str = "",
        policy: str | None = None,
        timeout_s: float = 10.0,
        zmq_context: zmq.asyncio.Context | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.agent = agent
        self.budget = budget
        self.reserve = reserve
        self.session = session
        self.token = token
        self.policy = policy
        self.timeout_s = timeout_s
        self.context = Context()
        self.proposals: asyncio.Queue[Proposal] = asyncio.Queue()
        self.welcome: dict[str, Any] = {}
        self.errors: list[LinkError] = []  # unsolicited ERRORs from the daemon
        self.resyncs = 0
        self._zctx = zmq_context or zmq.asyncio.Context.instance()
        self._sock: zmq.asyncio.Socket | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None

    # --- lifecycle -----------------------------------------------------------------------------------
    async def __aenter__(self) -> AgentLink:
        await self.connect()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def connect(self) -> dict[str, Any]:
        sock = self._zctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 1000)
        sock.connect(self.endpoint)
        self._sock = sock
        self._reader = asyncio.create_task(self._read(), name=f"agentlink-reader-{self.agent}")
        hello: dict[str, Any] = {
            "t": T.HELLO,
            "agent": self.agent,
            "session": self.session,
            "budget": self.budget,
        }
        if self.reserve is not None:
            hello["reserve"] = self.reserve
        if self.token:
            hello["token"] = self.token
        if self.policy:
            hello["policy"] = self.policy
        self.welcome = await self.request(hello)
        return self.welcome

    async def close(self) -> None:
        if self._sock is None:
            return
        with contextlib.suppress(LinkError, TimeoutError):
            await self.request({"t": T.BYE}, timeout_s=1.0)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._sock.close(0)
        self._sock = None

    # --- the context ---------------------------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return int(self.welcome.get("high_watermark", self.budget))

    async def snapshot(self, sections: Iterable[Section] | None = None) -> None:
        """Send the whole context (after attaching to a daemon that holds nothing for us)."""
        if sections is not None:
            self.context.reset(sections, self.context.version + 1)
        await self.request(
            {
                "t": T.SNAPSHOT,
                "version": self.context.version,
                "sections": [s.to_wire() for s in self.context],
            }
        )

    async def append(self, *sections: Section, wait: bool = False) -> None:
        await self._delta([Op("append", tuple(sections))], wait)

    async def replace(self, *sections: Section, wait: bool = False) -> None:
        await self._delta([Op("replace", tuple(sections))], wait)

    async def remove(self, *ids: str, wait: bool = False) -> None:
        await self._delta([Op("remove", ids=tuple(ids))], wait)

    async def _delta(self, ops: list[Op], wait: bool) -> None:
        base = self.context.version
        self.context.apply_ops(ops, base + 1)
        msg = {"t": T.DELTA, "base": base, "version": base + 1, "ops": [_op_wire(op) for op in ops]}
        if wait:
            await self.request(msg)
        else:
            self._send(msg)

    async def apply(self, proposal: Proposal) -> bool:
        """Apply a proposal to the context and ACK it, or NACK it as stale; True if applied."""
        reason = self.context.stale_reason(proposal)
        if reason:
            self._send({"t": T.NACK, "proposal": proposal.proposal, "reason": "stale", "detail": reason})
            return False
        version = self.context.version + 1
        self.context.apply_proposal(proposal, version)
        self._send({"t": T.ACK, "proposal": proposal.proposal, "version": version})
        return True

    async def reject(self, proposal: Proposal, reason: str = "rejected") -> None:
        self._send({"t": T.NACK, "proposal": proposal.proposal, "reason": reason})

    async def recall(self, *refs: str) -> dict[str, list[Section]]:
        reply = await self.request({"t": T.RECALL, "refs": list(refs)})
        return {
            item["ref"]: [Section.from_wire(s, DEFAULT_MAX_FRAME) for s in item["sections"]]
            for item in reply.get("items", [])
        }

    async def status(self) -> dict[str, Any]:
        return await self.request({"t": T.STATUS})

    # --- transport -----------------------------------------------------------------------------------
    def _send(self, msg: dict[str, Any]) -> None:
        if self._sock is None:
            raise LinkError("closed", "the link is closed")
        self._sock.send(encode(msg), flags=zmq.NOBLOCK)

    async def request(self, msg: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        rid = next(self._ids)
        msg["id"] = rid
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        try:
            self._send(msg)
            return await asyncio.wait_for(fut, timeout_s or self.timeout_s)
        except TimeoutError:
            raise LinkError("timeout", f"no answer to {msg['t']} from {self.endpoint}") from None
        finally:
            self._waiting.pop(rid, None)

    async def _read(self) -> None:
        assert self._sock is not None
        while True:
            frame = await self._sock.recv()
            try:
                msg = decode(frame)
            except ProtocolError:
                continue  # a daemon never sends garbage; ignore rather than crash the agent
            await self._on_message(msg)

    async def _on_message(self, msg: dict[str, Any]) -> None:
        t = msg["t"]
        ref = msg.get("re")
        fut = self._waiting.get(ref) if isinstance(ref, int) else None
        if t == T.ERROR:
            err = LinkError(str(msg.get("code")), str(msg.get("message")))
            if fut is not None and not fut.done():
                fut.set_exception(err)
            else:
                self.errors.append(err)
            return
        if fut is not None and not fut.done():
            fut.set_result(msg)
            return
        if t == T.PROPOSAL:
            with contextlib.suppress(ProtocolError):
                self.proposals.put_nowait(Proposal.from_wire(msg))
        elif t == T.RESYNC:
            self.resyncs += 1
            self._send(
                {
                    "t": T.SNAPSHOT,
                    "version": self.context.version,
                    "sections": [s.to_wire() for s in self.context],
                }
            )


def _op_wire(op: Op) -> dict[str, Any]:
    if op.op == "remove":
        return {"op": "remove", "ids": list(op.ids)}
    return {"op": op.op, "sections": [s.to_wire() for s in op.sections]}
