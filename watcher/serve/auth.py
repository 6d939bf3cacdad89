"""Who is this connection? ``identity = authenticate(hello, peer, cfg)``.

The identity an agent's rows belong to (archive, proposals, checkpoints: watcher.store.store) comes from
the connection's authentication, never from the name a client merely claims:

* **token** — ``[agents.<id>] token = "..."`` in the config. A HELLO naming ``<id>`` must carry
  that token (compared in constant time), else it is refused with ``unauthorized``. A token
  presented for an agent that has none configured is refused too (a client that believes it is
  protected must not silently run unprotected).
* **curve** — on a CURVE transport the peer's public key is proven by the handshake. When the
  deployment maps keys to agents (``key_owner``), a HELLO must name the key's owner.
* **local** — an agent with no token configured. Trust model: the transport is the boundary. The
  ``ipc://`` socket file is 0660 in a 0750 directory (watcher.serve.transport), so only the daemon's user
  and group can connect at all; ``tcp://`` requires CURVE with an allow-list of client keys. Among
  the peers that got through, an agent without a token is trusted to name itself, so two such
  processes can claim each other's names — give every agent that must be kept apart from the
  others a token (its rows are then unreachable without it).

The operator's view (``compactd status`` from an unattached connection) lists every agent's
counters and no content; ``compactd recall`` reads the state directory, which only the daemon's
user can open (0700).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ipc.protocol import Hello
from watcher.config.settings import Config

METHODS: Final = ("token", "curve", "local")


class AuthError(Exception):
    """The HELLO does not prove the identity it claims; the message says why (never the secret)."""


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """What the transport knows about a connection."""

    transport: str = "ipc"  # ipc | tcp | inproc
    curve_key: str = ""  # z85 public key proven by a CURVE handshake ("" = none)


@dataclass(frozen=True, slots=True)
class Identity:
    agent: str
    method: str  # token | curve | local


def token_for(cfg: Config, agent: str) -> str | None:
    override = cfg.agents.get(agent)
    return override.token if override is not None else None


def tokens_configured(cfg: Config) -> bool:
    return any(o.token for o in cfg.agents.values())


def authenticate(
    hello: Hello,
    peer: PeerInfo,
    cfg: Config,
    key_owner: Callable[[str], str | None] | None = None,
) -> Identity:
    """The identity this HELLO proves; AuthError if it proves none."""
    agent = hello.agent
    expected = token_for(cfg, agent)
    if peer.curve_key and key_owner is not None:
        owner = key_owner(peer.curve_key)
        if owner is not None and owner != agent:
            raise AuthError(f"this connection's CURVE key belongs to agent {owner!r}, not {agent!r}")
        if owner == agent and expected is None:
            return Identity(agent, "curve")
    if expected:
        if not hello.token:
            raise AuthError(f"agent {agent!r} requires its token ([agents.{agent}] token); none was sent")
        if not hmac.compare_digest(hello.token.encode("utf-8"), expected.encode("utf-8")):
            raise AuthError(f"wrong token for agent {agent!r}")
        return Identity(agent, "token")
    if hello.token:
        raise AuthError(
            f"a token was sent for agent {agent!r}, but the daemon has no token configured for it "
            f"(set [agents.{agent}] token, or do not send one)"
        )
    return Identity(agent, "local")
