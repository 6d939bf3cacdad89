"""The session part of AgentLink (ipc.client): attaching (HELLO/WELCOME), heartbeats when idle,
attaching again by itself when the daemon no longer knows the agent (restart, expiry), the
dispatch of what the daemon sends (replies, ERROR, RESYNC, PROPOSAL, BYE), and closing."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import zmq
import zmq.asyncio

from ipc.context import Context
from ipc.protocol import DEFAULT_MAX_FRAME, SUPPORTED_VERSIONS, E, Proposal, ProtocolError, T
from ipc.requests import LinkRequests
from ipc.transport import LinkError

_KEEP_ERRORS = 100  # unsolicited errors kept in link.errors


class LinkSession(LinkRequests):
    """Attach, heartbeat, re-attach, dispatch, close; the constructor of the whole link."""

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
        tokenizer: str = "",
        heartbeat: bool = True,
        reattach: bool = True,
        curve_serverkey: bytes | str | None = None,
        curve_publickey: bytes | str | None = None,
        curve_secretkey: bytes | str | None = None,
        planner: str | None = None,
        reader: bool = False,
    ) -> None:
        super().__init__(
            endpoint, agent, timeout_s, zmq_context, (curve_serverkey, curve_publickey, curve_secretkey)
        )
        self.context = Context()
        self.proposals: asyncio.Queue[Proposal] = asyncio.Queue()
        self.resyncs = 0
        self.coalesced = 0  # changes sent as one SNAPSHOT because the daemon could not keep up
        self._dirty = False  # a change could not be sent: the next send is a SNAPSHOT
        self.planner = planner  # compaction strategy to ask for (optimistic, recency, reactive, masking)
        # a reader attaches to the agent's archive only (RECALL, COMPRESS): it has no context and
        # does not replace the agent's own attachment (the MCP server, the Claude Code hooks)
        self.reader = reader
        self.budget = budget
        self.reserve = reserve
        self.session = session
        self.token = token
        self.policy = policy
        self.welcome: dict[str, Any] = {}
        self.errors: list[LinkError] = []  # unsolicited ERRORs from the daemon
        self.tokenizer = tokenizer  # the agent's tokenizer (its unit for budget and tokens): a hint
        self.detached = ""  # the reason of a BYE the daemon sent on its own (shutdown, expired)
        self.reattaches = 0
        self.epoch = 0  # the side-effect epoch (ipc.requests)
        self._heartbeat, self._auto_reattach = heartbeat, reattach
        self._reattaching: asyncio.Task[None] | None = None

    async def connect(self) -> dict[str, Any]:
        sock = self._zctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 1000)
        if all(self._curve):
            server, public, secret = (k.encode("ascii") if isinstance(k, str) else k for k in self._curve)
            sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = server, public, secret
        sock.connect(self.endpoint)
        self._sock = sock
        self._reader = asyncio.create_task(self._read(), name=f"agentlink-reader-{self.agent}")
        try:
            await self._attach(resume=False)
        except BaseException:
            await self.close(bye=False)
            raise
        if self._heartbeat and self.heartbeat_s > 0:
            self._spawn(self._beat(), "heartbeat")
        return self.welcome

    def _hello(self, resume: bool) -> dict[str, Any]:
        hello: dict[str, Any] = {
            "t": T.HELLO,
            "versions": list(SUPPORTED_VERSIONS),
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
        if self.planner:
            hello["planner"] = self.planner
        if self.tokenizer:
            hello["tokenizer"] = self.tokenizer
        if resume:
            hello["resume"] = True
        if self.reader:
            hello["reader"] = True
        return hello

    async def _attach(self, resume: bool) -> None:
        welcome = await self.request(self._hello(resume))
        if welcome.get("t") != T.WELCOME or welcome.get("version") not in SUPPORTED_VERSIONS:
            raise LinkError(E.BAD_VERSION, f"unexpected answer to HELLO: {welcome}")
        self.welcome = welcome
        self.heartbeat_s = float(welcome.get("heartbeat_s", 0.0))
        self.max_frame = int(welcome.get("max_frame", DEFAULT_MAX_FRAME))
        self.detached = ""

    async def reattach(self) -> None:
        """Attach again and send the whole context: after the daemon restarted or expired us.

        Runs by itself when the daemon answers ``not_attached`` (unless ``reattach=False``)."""
        await self._attach(resume=not self.reader)
        if not self.reader:
            await self._snapshot_request()
        self.reattaches += 1

    async def _beat(self) -> None:
        """HEARTBEAT when nothing was sent for heartbeat_s (any frame keeps the agent alive)."""
        while True:
            idle = time.monotonic() - self._last_sent
            if idle < self.heartbeat_s:
                await asyncio.sleep(self.heartbeat_s - idle)
                continue
            with contextlib.suppress(LinkError):
                if self._dirty:
                    self._flush()
                else:
                    self._send({"t": T.HEARTBEAT})
            if time.monotonic() - self._last_sent >= self.heartbeat_s:  # could not send: back off
                await asyncio.sleep(self.heartbeat_s)

    async def close(self, bye: bool = True) -> None:
        if self._sock is None:
            return
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if bye and not self.detached:
            with contextlib.suppress(LinkError, TimeoutError):
                await self.request({"t": T.BYE}, timeout_s=1.0)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._sock.close(0)
        self._sock = None

    @property
    def high_watermark(self) -> int:
        return int(self.welcome.get("high_watermark", self.budget))

    async def _on_message(self, msg: dict[str, Any]) -> None:
        t = msg["t"]
        ref = msg.get("re")
        fut = self._waiting.get(ref) if isinstance(ref, int) else None
        if t == T.ERROR:
            err = LinkError(str(msg.get("code")), str(msg.get("message")))
            if err.code == E.NOT_ATTACHED:
                self._lost()
            if fut is not None and not fut.done():
                fut.set_exception(err)
            else:
                self.errors.append(err)
                del self.errors[:-_KEEP_ERRORS]
            return
        if t == T.RESYNC:  # answered with a SNAPSHOT; its SYNCED answers the request that found the gap
            self.resyncs += 1
            rid = ref if fut is not None and not fut.done() else None
            try:
                for frame in self._snapshot_frames(rid):
                    self._send_frame(frame)
                self._dirty = False
            except LinkError as exc:
                self._dirty = True
                self.errors.append(exc)
            return
        if fut is not None and not fut.done():
            fut.set_result(msg)
            return
        if t == T.PROPOSAL:
            with contextlib.suppress(ProtocolError):
                self.proposals.put_nowait(Proposal.from_wire(msg))
        elif t == T.BYE:  # the daemon lets go of us (shutdown, expired)
            self.detached = str(msg.get("reason") or "bye")
        elif t == T.HEARTBEAT and msg.get("attached") is False:
            self._lost()

    def _lost(self) -> None:
        """The daemon does not know us (restarted, or expired us): attach again, once at a time."""
        if not self._auto_reattach or not self.welcome or self._sock is None:
            return
        if self._reattaching is not None and not self._reattaching.done():
            return

        async def again() -> None:
            try:
                await self.reattach()
            except LinkError as exc:
                self.errors.append(exc)

        self._reattaching = self._spawn(again(), "reattach")
