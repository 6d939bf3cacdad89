"""The transport part of AgentLink (ipc.client): one DEALER socket to the daemon, frames sent without
ever blocking the agent (a full send queue is LinkError ``backpressure``), requests matched to their
replies by ``id``, and the reader task that hands every other frame to ``_on_message``."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import zmq
import zmq.asyncio

from ipc.protocol import DEFAULT_MAX_FRAME, E, ProtocolError, decode, encode

MAX_INBOUND = 1 << 30  # the daemon is trusted; this only bounds memory


class LinkError(RuntimeError):
    """The daemon refused a request or did not answer; ``code`` is the protocol error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class LinkTransport:
    """Socket, send queue, request/reply matching and the reader task; the link's parts build on it."""

    def __init__(
        self,
        endpoint: str,
        agent: str,
        timeout_s: float,
        zmq_context: zmq.asyncio.Context | None,
        curve: tuple[bytes | str | None, bytes | str | None, bytes | str | None],
    ) -> None:
        self.endpoint = endpoint
        self.agent = agent
        self.timeout_s = timeout_s
        self.heartbeat_s = 0.0  # from WELCOME; 0 = no heartbeats
        self.max_frame = DEFAULT_MAX_FRAME  # from WELCOME: larger frames are refused locally
        self._last_sent = self._last_heard = 0.0
        self._tasks: set[asyncio.Task[None]] = set()
        self._zctx = zmq_context or zmq.asyncio.Context.instance()
        # CURVE (required by a daemon on tcp://): the daemon's public key and this agent's key pair,
        # z85 text as in the files `compactd keygen` writes (zmq.auth.load_certificate reads them).
        self._curve = curve
        if any(self._curve) and not all(self._curve):
            raise ValueError("CURVE needs curve_serverkey, curve_publickey and curve_secretkey together")
        self._sock: zmq.asyncio.Socket | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None

    def _spawn(self, coro: Any, what: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro, name=f"agentlink-{what}-{self.agent}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @property
    def alive(self) -> bool:
        """The daemon was heard from recently (within three heartbeat intervals)."""
        window = 3 * (self.heartbeat_s or self.timeout_s)
        return self._sock is not None and time.monotonic() - self._last_heard < window

    def _encode(self, msg: dict[str, Any]) -> bytes:
        frame = encode(msg)
        if len(frame) > self.max_frame - 16:  # 16: room for the id a request adds
            raise LinkError(E.TOO_LARGE, f"{msg['t']} of {len(frame)} bytes exceeds {self.max_frame}")
        return frame

    def _send_frame(self, frame: bytes) -> None:
        if self._sock is None:
            raise LinkError("closed", "the link is closed")
        try:
            self._sock.send(frame, flags=zmq.NOBLOCK)
        except zmq.Again:
            raise LinkError("backpressure", "the daemon is not keeping up (send queue full)") from None
        self._last_sent = time.monotonic()

    def _send(self, msg: dict[str, Any]) -> None:
        self._send_frame(self._encode(msg))

    async def request(self, msg: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """Send ``msg`` with a fresh ``id``; the reply (``re`` = that id), or LinkError."""
        rid = next(self._ids)
        msg["id"] = rid
        return await self._exchange(rid, [self._encode(msg)], str(msg["t"]), timeout_s)

    async def _exchange(
        self, rid: int, frames: list[bytes], what: str, timeout_s: float | None = None
    ) -> dict[str, Any]:
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        try:
            for frame in frames:
                self._send_frame(frame)
            return await asyncio.wait_for(fut, timeout_s or self.timeout_s)
        except TimeoutError:
            raise LinkError("timeout", f"no answer to {what} from {self.endpoint}") from None
        finally:
            self._waiting.pop(rid, None)

    async def _read(self) -> None:
        assert self._sock is not None
        while True:
            frame = await self._sock.recv()
            self._last_heard = time.monotonic()
            try:
                msg = decode(frame, MAX_INBOUND)
            except ProtocolError:
                continue  # a daemon never sends garbage; ignore rather than crash the agent
            await self._on_message(msg)

    async def _on_message(self, msg: dict[str, Any]) -> None:
        """A frame from the daemon (the session part, ipc.session, dispatches it)."""
        raise NotImplementedError
