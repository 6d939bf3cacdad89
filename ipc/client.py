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

import asyncio
import contextlib
import itertools
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Protocol

import zmq
import zmq.asyncio

from ipc.context import Context
from ipc.protocol import (
    DEFAULT_MAX_FRAME,
    MAX_DETAIL_LEN,
    SUPPORTED_VERSIONS,
    E,
    Op,
    Proposal,
    ProtocolError,
    T,
    decode,
    encode,
)
from ipc.sections import Section


class LinkError(RuntimeError):
    """The daemon refused a request or did not answer; ``code`` is the protocol error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class Target(Protocol):
    """Something a proposal is applied onto besides ``link.context`` (e.g. adapters.Transcript)."""

    def check(self, proposal: Proposal) -> str:
        """ "" if the proposal can be applied, else why not."""
        ...

    def apply(self, proposal: Proposal) -> None: ...


_ENVELOPE = 1024  # bytes kept free in a frame for the map around the sections


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
        tokenizer: str = "",
        heartbeat: bool = True,
        reattach: bool = True,
        curve_serverkey: bytes | str | None = None,
        curve_publickey: bytes | str | None = None,
        curve_secretkey: bytes | str | None = None,
        planner: str | None = None,
        reader: bool = False,
    ) -> None:
        self.endpoint = endpoint
        self.planner = planner  # compaction strategy to ask for (optimistic, recency, reactive, masking)
        self.agent = agent
        # a reader attaches to the agent's archive only (RECALL, COMPRESS): it has no context and
        # does not replace the agent's own attachment (the MCP server, the Claude Code hooks)
        self.reader = reader
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
        self.tokenizer = tokenizer  # the agent's tokenizer (its unit for budget and tokens): a hint
        self.heartbeat_s = 0.0  # from WELCOME; 0 = no heartbeats
        self.max_frame = DEFAULT_MAX_FRAME  # from WELCOME: larger frames are refused locally
        self.detached = ""  # the reason of a BYE the daemon sent on its own (shutdown, expired)
        self.reattaches = 0
        self.coalesced = 0  # changes sent as one SNAPSHOT because the daemon could not keep up
        # side-effect epoch: bump it (side_effect()) whenever the agent does something a context
        # restore cannot undo; RESTORE refuses a checkpoint saved at another epoch unless forced
        self.epoch = 0
        self._heartbeat, self._auto_reattach = heartbeat, reattach
        self._last_sent = self._last_heard = 0.0
        self._dirty = False  # a change could not be sent: the next send is a SNAPSHOT
        self._tasks: set[asyncio.Task[None]] = set()
        self._reattaching: asyncio.Task[None] | None = None
        self._zctx = zmq_context or zmq.asyncio.Context.instance()
        # CURVE (required by a daemon on tcp://): the daemon's public key and this agent's key pair,
        # z85 text as in the files `compactd keygen` writes (zmq.auth.load_certificate reads them).
        self._curve = (curve_serverkey, curve_publickey, curve_secretkey)
        if any(self._curve) and not all(self._curve):
            raise ValueError("CURVE needs curve_serverkey, curve_publickey and curve_secretkey together")
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

    def _spawn(self, coro: Any, what: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro, name=f"agentlink-{what}-{self.agent}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

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

    @property
    def alive(self) -> bool:
        """The daemon was heard from recently (within three heartbeat intervals)."""
        window = 3 * (self.heartbeat_s or self.timeout_s)
        return self._sock is not None and time.monotonic() - self._last_heard < window

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

    # --- the context ---------------------------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return int(self.welcome.get("high_watermark", self.budget))

    async def snapshot(self, sections: Iterable[Section] | None = None) -> None:
        """Send the whole context (after attaching to a daemon that holds nothing for us).

        With ``sections``, they become the context first (at the next version). A context larger
        than one frame goes in several parts; the daemon's mirror changes when the last arrives."""
        if sections is not None:
            self.context.reset(sections, self.context.version + 1)
        await self._snapshot_request()

    async def _snapshot_request(self) -> None:
        rid = next(self._ids)
        await self._exchange(rid, self._snapshot_frames(rid), T.SNAPSHOT)

    def _snapshot_frames(self, rid: int | None) -> list[bytes]:
        """The context as SNAPSHOT frames, each within max_frame; ``rid`` goes on the last one."""
        version = self.context.version
        wires = [s.to_wire() for s in self.context]
        whole: dict[str, Any] = {"t": T.SNAPSHOT, "version": version, "sections": wires}
        if rid is not None:
            whole["id"] = rid
        frame = encode(whole)
        if len(frame) <= self.max_frame:
            return [frame]
        limit = self.max_frame - _ENVELOPE
        parts: list[list[dict[str, Any]]] = [[]]
        size = 0
        for w in wires:
            n = len(encode(w))
            if n > limit:
                raise LinkError(E.TOO_LARGE, f"section {w['id']!r} alone is {n} bytes; frames are {limit}")
            if parts[-1] and size + n > limit:
                parts.append([])
                size = 0
            parts[-1].append(w)
            size += n
        frames = []
        for i, chunk in enumerate(parts):
            msg: dict[str, Any] = {"t": T.SNAPSHOT, "version": version, "part": i, "sections": chunk}
            if i < len(parts) - 1:
                msg["more"] = True
            elif rid is not None:
                msg["id"] = rid
            frames.append(encode(msg))
        return frames

    def _flush(self) -> None:
        """Send the whole context in place of changes that could not be sent (latest wins)."""
        for frame in self._snapshot_frames(None):
            self._send_frame(frame)
        self._dirty = False

    async def append(self, *sections: Section, wait: bool = False) -> None:
        await self._delta([Op("append", tuple(sections))], wait)

    async def replace(self, *sections: Section, wait: bool = False) -> None:
        await self._delta([Op("replace", tuple(sections))], wait)

    async def remove(self, *ids: str, wait: bool = False) -> None:
        await self._delta([Op("remove", ids=tuple(ids))], wait)

    async def _delta(self, ops: list[Op], wait: bool) -> None:
        """Change the context and tell the daemon. Nothing changes if the frame would be too large
        or an op does not fit (ContextError); a daemon that cannot keep up never blocks the agent."""
        base = self.context.version
        msg = {"t": T.DELTA, "base": base, "version": base + 1, "ops": [_op_wire(op) for op in ops]}
        frame = self._encode(msg)
        self.context.apply_ops(ops, base + 1)
        if wait:
            if self._dirty:
                await self._snapshot_request()  # carries this change too
                self._dirty = False
            else:
                await self.request(msg)
            return
        try:
            if self._dirty:
                self._flush()
            else:
                self._send_frame(frame)
        except LinkError as exc:
            if exc.code != "backpressure":
                raise
            self._dirty = True  # the daemon's queue is full: coalesce into one SNAPSHOT later
            self.coalesced += 1

    async def apply(self, proposal: Proposal, onto: Target | None = None) -> bool:
        """Apply a proposal to the context (and ``onto``, e.g. an adapters.Transcript) and ACK it;
        NACK it as stale if its sections changed, or as rejected if ``onto`` cannot take it (a
        tool call would lose its result). True if applied."""
        reason = self.context.stale_reason(proposal)
        if reason:
            await self.reject(proposal, "stale", reason)
            return False
        if onto is not None and (why := onto.check(proposal)):
            await self.reject(proposal, "rejected", why)
            return False
        version = self.context.version + 1
        self.context.apply_proposal(proposal, version)
        if onto is not None:
            onto.apply(proposal)
        if self._dirty:  # the daemon is behind anyway: the SNAPSHOT voids the proposal there
            with contextlib.suppress(LinkError):
                self._flush()
        else:
            self._send({"t": T.ACK, "proposal": proposal.proposal, "version": version})
        return True

    async def reject(self, proposal: Proposal, reason: str = "rejected", detail: str = "") -> None:
        """NACK a proposal: ``reason`` is stale, rejected or failed."""
        msg: dict[str, Any] = {"t": T.NACK, "proposal": proposal.proposal, "reason": reason}
        if detail:
            msg["detail"] = detail[:MAX_DETAIL_LEN]
        self._send(msg)

    # --- the archive and checkpoints (the daemon's store) ------------------------------------------
    async def recall(self, *refs: str) -> dict[str, list[Section]]:
        """The originals archived under ``refs`` (a digest's ``meta["archive"]``), all pages
        fetched. An entry the retention policy evicted comes back empty (see recall_items)."""
        out: dict[str, list[Section]] = {}
        for item in await self.recall_items({"refs": list(refs)}):
            out.setdefault(item["ref"], []).extend(_sections(item["sections"]))
        return out

    async def recall_sections(self, *ids: str) -> list[tuple[str, Section]]:
        """Archived copies of sections by id, newest first, as (archive ref, section); a digest's
        id gives the originals it replaced. Covers all of this agent's sessions."""
        return [
            (item["ref"], sec)
            for item in await self.recall_items({"sections": list(ids)})
            for sec in _sections(item["sections"])
        ]

    async def recall_items(self, what: dict[str, Any]) -> list[dict[str, Any]]:
        """RECALL ``what`` (refs or sections), following ``next_offset`` until the last page."""
        items: list[dict[str, Any]] = []
        offset: int | None = 0
        while offset is not None:
            reply = await self.request({"t": T.RECALL, **what, "offset": offset})
            items.extend(reply.get("items", []))
            nxt = reply.get("next_offset")
            offset = nxt if isinstance(nxt, int) and nxt > offset else None
        return items

    async def search(
        self, query: str, *, limit: int = 50, offset: int = 0, session: str | None = None
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Text search (ASCII case-insensitive) in this agent's archive, newest first: (hits, the
        offset of the next page or None). A hit has ref, session, section, kind, pos, snippet."""
        msg: dict[str, Any] = {"t": T.RECALL, "query": query, "limit": limit, "offset": offset}
        if session is not None:
            msg["session"] = session
        reply = await self.request(msg)
        nxt = reply.get("next_offset")
        return list(reply.get("hits", [])), nxt if isinstance(nxt, int) else None

    async def compress(
        self, text: str, *, label: str = "", min_tokens: int = 0, target_tokens: int = 0
    ) -> dict[str, Any]:
        """COMPRESS: the daemon archives ``text`` (recallable like any original) and answers with its
        digest: {compressed, text, ref, section, tokens_before, tokens_after, method}; a text below
        ``min_tokens`` comes back as it is (compressed false). Reader connections (``reader=True``)."""
        options = {"label": label, "min_tokens": min_tokens, "target_tokens": target_tokens}
        msg: dict[str, Any] = {"t": T.COMPRESS, "text": text} | {k: v for k, v in options.items() if v}
        reply = await self.request(msg)
        return {k: v for k, v in reply.items() if k not in ("t", "re", "v")}

    def side_effect(self) -> int:
        """Record an effect outside the context (a file written, a command run): bumps ``epoch``."""
        self.epoch += 1
        return self.epoch

    async def checkpoint(self, name: str = "", *, note: str = "", overwrite: bool = False) -> dict[str, Any]:
        """Save the context (as the daemon mirrors it, at its current version) with ``epoch``;
        returns the checkpoint's metadata (name, version, epoch, tokens, sections, ...)."""
        msg: dict[str, Any] = {
            "t": T.CHECKPOINT,
            "op": "save",
            "epoch": self.epoch,
            "version": self.context.version,
        }
        if name:
            msg["name"] = name
        if note:
            msg["note"] = note
        if overwrite:
            msg["overwrite"] = True
        reply = await self.request(msg)
        return dict(reply["checkpoint"])

    async def checkpoints(self) -> list[dict[str, Any]]:
        """This agent's checkpoints (all its sessions), oldest first."""
        reply = await self.request({"t": T.CHECKPOINT, "op": "list"})
        return list(reply.get("checkpoints", []))

    async def show_checkpoint(
        self, name: str, *, sections: bool = False
    ) -> tuple[dict[str, Any], list[Section]]:
        """A checkpoint's metadata and, with ``sections``, its sections (all pages)."""
        reply = await self.request({"t": T.CHECKPOINT, "op": "show", "name": name, "sections": sections})
        meta = dict(reply["checkpoint"])
        wires = list(reply.get("sections", []))
        wires += await self._checkpoint_pages(name, reply.get("next_offset"))
        return meta, _sections(wires)

    async def drop_checkpoint(self, name: str) -> None:
        await self.request({"t": T.CHECKPOINT, "op": "drop", "name": name})

    async def restore(self, name: str, *, force: bool = False) -> dict[str, Any]:
        """Make checkpoint ``name`` the context again (here and in the daemon's mirror).

        Refused with LinkError ``epoch_changed`` when ``epoch`` moved since the checkpoint, unless
        ``force``. Returns the daemon's report: version, expected_tokens (at save), actual_tokens
        (the text recounted now), token_mismatch, forced, epoch_saved, epoch_now, expired_proposals
        — plus context_tokens, what ``link.context`` holds after the restore."""
        reply = await self.request(
            {
                "t": T.RESTORE,
                "name": name,
                "epoch": self.epoch,
                "force": force,
                "version": self.context.version,
            }
        )
        wires = list(reply.get("sections", []))
        wires += await self._checkpoint_pages(name, reply.get("next_offset"))
        self.context.reset(_sections(wires), int(reply["version"]))
        report = {k: v for k, v in reply.items() if k not in ("t", "re", "v", "sections", "next_offset")}
        report["context_tokens"] = self.context.tokens
        return report

    async def _checkpoint_pages(self, name: str, offset: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while isinstance(offset, int):
            page = await self.request(
                {"t": T.CHECKPOINT, "op": "show", "name": name, "sections": True, "offset": offset}
            )
            out += page.get("sections", [])
            nxt = page.get("next_offset")
            offset = nxt if isinstance(nxt, int) and nxt > offset else None
        return out

    async def status(self) -> dict[str, Any]:
        """This agent's state in the daemon (STATE: ``daemon`` and ``agents`` = [this agent])."""
        return await self.request({"t": T.STATUS})

    async def ping(self) -> float:
        """A HEARTBEAT round trip, in seconds."""
        t0 = time.perf_counter()
        await self.request({"t": T.HEARTBEAT})
        return time.perf_counter() - t0

    # --- transport -----------------------------------------------------------------------------------
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
                msg = decode(frame, _MAX_INBOUND)
            except ProtocolError:
                continue  # a daemon never sends garbage; ignore rather than crash the agent
            await self._on_message(msg)

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


_MAX_INBOUND = 1 << 30  # the daemon is trusted; this only bounds memory
_KEEP_ERRORS = 100  # unsolicited errors kept in link.errors


def _sections(wires: Iterable[Any]) -> list[Section]:
    return [Section.from_wire(w, _MAX_INBOUND) for w in wires]


def _op_wire(op: Op) -> dict[str, Any]:
    if op.op == "remove":
        return {"op": "remove", "ids": list(op.ids)}
    return {"op": op.op, "sections": [s.to_wire() for s in op.sections]}
