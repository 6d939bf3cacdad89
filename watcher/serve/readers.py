"""Reader connections: a HELLO with ``reader: true`` attaches to an agent's *archive* only.

The MCP server (``compactd mcp``) and the Claude Code hooks run beside an agent as processes of
their own. They prove the agent's identity exactly as the agent does (token, CURVE key: watcher.auth)
but must not take over its attachment (a second plain HELLO for the same id would replace the
agent's). A reader has no context and no proposals; it may send RECALL (the agent's own archive,
all its sessions), COMPRESS (watcher.compress: archive a large text, get a digest back),
HEARTBEAT and BYE. Anything else gets ``ERROR invalid``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Final, Protocol

from ipc.protocol import SUPPORTED_VERSIONS, E, ProtocolError, T, negotiate, parse_hello, parse_recall
from watcher.config.settings import Config
from watcher.observe import logs
from watcher.serve.auth import AuthError, Identity, PeerInfo, authenticate
from watcher.serve.recall import recall
from watcher.store.store import Store

log = logs.get("compactd.readers")

MAX_READERS: Final = 4096  # reader connections remembered at once; the oldest is forgotten first


class Host(Protocol):
    """What readers need of the server (watcher.serve.server.Server)."""

    store: Store
    cfg: Config
    peer_info: PeerInfo
    max_frame: int

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
        ident, _session = found
        self.by_peer.move_to_end(peer)
        srv = self.server
        if t == T.RECALL:
            srv.send(peer, recall(srv.store, ident.agent, parse_recall(msg), ref, srv.max_frame))
        elif t == T.BYE:
            self.by_peer.pop(peer, None)
            srv.send(peer, {"t": T.BYE, "re": ref} if ref is not None else {"t": T.BYE})
        else:
            raise ProtocolError(E.INVALID, f"{t}: a reader connection may send RECALL, HEARTBEAT, BYE", ref)
        return True
