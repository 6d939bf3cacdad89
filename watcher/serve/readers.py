"""Reader connections: a HELLO with ``reader: true`` attaches to an agent's *archive* only.

The MCP server (``compactd mcp``) and the Claude Code hooks run beside an agent as processes of
their own. They prove the agent's identity exactly as the agent does (token, CURVE key: watcher.auth)
but must not take over its attachment (a second plain HELLO for the same id would replace the
agent's). A reader has no context and no proposals; it may send RECALL (the agent's own archive,
all its sessions), COMPRESS (watcher.serve.compress: archive a large text, get a digest back),
HEARTBEAT and BYE. Anything else gets ``ERROR invalid``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import OrderedDict
from typing import Any, Final, Protocol

from ipc.protocol import (
    SUPPORTED_VERSIONS,
    CompressRequest,
    E,
    ProtocolError,
    T,
    negotiate,
    parse_compress,
    parse_hello,
    parse_recall,
)
from summarizer.digest import Summarizer
from watcher.config.settings import Config
from watcher.observe import logs
from watcher.serve.auth import AuthError, Identity, PeerInfo, authenticate
from watcher.serve.compress import compress
from watcher.serve.recall import recall
from watcher.serve.scheduler import FairScheduler
from watcher.store.store import Store, StoreError

log = logs.get("compactd.readers")

MAX_READERS: Final = 4096  # reader connections remembered at once; the oldest is forgotten first


class Host(Protocol):
    """What readers need of the server (watcher.serve.server.Server)."""

    store: Store
    cfg: Config
    peer_info: PeerInfo
    max_frame: int
    summarizer: Summarizer
    scheduler: FairScheduler
    tasks: set[asyncio.Task[None]]

    def send(self, peer: bytes, msg: dict[str, Any], *, quiet: bool = False) -> None: ...

    def tokenizer_name(self) -> str: ...


class Readers:
    def __init__(self, server: Host) -> None:
        self.server = server
        self.by_peer: OrderedDict[bytes, tuple[Identity, str]] = OrderedDict()  # peer → (who, session)

    def __contains__(self, peer: object) -> bool:
        return peer in self.by_peer

    def hello(self, peer: bytes, msg: dict[str, Any], ref: int | None) -> None:
        srv = self.server
        hello = parse_hello(msg)
        chosen = negotiate(hello.versions, ref)
        try:
            ident = authenticate(hello, srv.peer_info, srv.cfg)
        except AuthError as exc:
            log.warning("reader_refused", agent=hello.agent, reason=str(exc))
            raise ProtocolError(E.UNAUTHORIZED, f"HELLO: {exc}", ref) from None
        self.by_peer.pop(peer, None)
        self.by_peer[peer] = (ident, hello.session)
        while len(self.by_peer) > MAX_READERS:
            self.by_peer.popitem(last=False)
        log.info("reader_attached", agent=ident.agent, session=hello.session)
        srv.send(
            peer,
            {
                "t": T.WELCOME,
                "re": ref,
                "version": chosen,
                "versions": list(SUPPORTED_VERSIONS),
                "agent": ident.agent,
                "session": hello.session,
                "reader": True,
                "max_frame": srv.max_frame,
                "heartbeat_s": srv.cfg.daemon.heartbeat_s,
                "agent_timeout_s": srv.cfg.daemon.agent_timeout_s,
                "tokenizer": srv.tokenizer_name(),
            },
        )

    def serve(self, peer: bytes, t: str, msg: dict[str, Any], ref: int | None) -> bool:
        """Handle a reader's request; False if ``peer`` is not a reader."""
        found = self.by_peer.get(peer)
        if found is None:
            return False
        ident, session = found
        self.by_peer.move_to_end(peer)
        srv = self.server
        if t == T.RECALL:
            srv.send(peer, recall(srv.store, ident.agent, parse_recall(msg), ref, srv.max_frame))
        elif t == T.COMPRESS:  # digest work off the serving loop's turn; the reply follows
            req = parse_compress(msg, srv.max_frame)
            task = asyncio.create_task(self._compress(peer, ident.agent, session, req, ref))
            srv.tasks.add(task)
            task.add_done_callback(srv.tasks.discard)
        elif t == T.BYE:
            self.by_peer.pop(peer, None)
            srv.send(peer, {"t": T.BYE, "re": ref} if ref is not None else {"t": T.BYE})
        else:
            raise ProtocolError(
                E.INVALID, f"{t}: a reader connection may send RECALL, COMPRESS, HEARTBEAT, BYE", ref
            )
        return True

    async def _compress(
        self, peer: bytes, agent: str, session: str, req: CompressRequest, ref: int | None
    ) -> None:
        try:
            reply = await compress(self.server, agent, session, req, ref)
        except (StoreError, sqlite3.Error) as exc:
            log.exception("compress_failed", agent=agent)
            reply = {
                "t": T.ERROR,
                "code": E.INTERNAL,
                "message": f"COMPRESS: the store failed: {exc}",
                "re": ref,
            }
        self.server.send(peer, reply)
