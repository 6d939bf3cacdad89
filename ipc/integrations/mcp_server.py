"""``compactd mcp``: an MCP server (stdio) through which the *model* recalls what digests replaced.

Tools, all scoped to ONE agent identity (the agent id and its token, from the environment or a
small TOML file): the server attaches to the daemon as a *reader* of that agent's archive
(HELLO ``reader: true``, docs/PROTOCOL.md), so it never displaces the agent's own attachment, and
the daemon answers only from that agent's rows — another agent's references are "not found".

* ``recall(ref, offset)`` — the originals behind a digest's reference (``a17``; ``a17#m3`` for one
  section of it), a page at a time; the text says how to get the next page.
* ``search(query, offset)`` — text search in the agent's own archive, newest first.
* ``expand(section_id, offset)`` — the archived original(s) of a section or digest id.

Attach it (``COMPACTD_AGENT``/``COMPACTD_TOKEN``/``COMPACTD_SOCKET`` in the environment):
``claude mcp add compactd -- compactd mcp``, ``codex mcp add compactd -- compactd mcp``, or an
OpenHands ``mcp_config`` entry ``{"command": "compactd", "args": ["mcp"]}``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ipc.client import AgentLink, LinkError
from ipc.protocol import T
from ipc.recalled import PAGE_BYTES, render_items

SEARCH_HITS = 20


@dataclass(frozen=True)
class Identity:
    """Who the server reads for, and where the daemon is."""

    endpoint: str
    agent: str
    token: str = ""
    session: str = "default"


def identity(
    default_endpoint: str,
    *,
    config: str | None = None,
    env: Mapping[str, str] | None = None,
    agent: str | None = None,
) -> Identity:
    """The identity from (lowest first) the TOML file's ``[mcp]`` table (``agent``, ``token``,
    ``socket``, ``session``), then ``COMPACTD_AGENT``, ``COMPACTD_TOKEN``, ``COMPACTD_SOCKET``,
    ``COMPACTD_SESSION``, then ``agent``. ValueError if no agent id is given anywhere."""
    env = os.environ if env is None else env
    table: dict[str, Any] = {}
    path = config or env.get("COMPACTD_MCP_CONFIG")
    if path:
        with Path(path).open("rb") as f:
            table = dict(tomllib.load(f).get("mcp", {}))
        for key, value in table.items():
            if key not in ("agent", "token", "socket", "session") or not isinstance(value, str):
                raise ValueError(f"{path}: [mcp] {key}: unknown key or not a string")

    def pick(key: str, var: str, default: str) -> str:
        return env.get(var) or str(table.get(key, default))

    who = agent or pick("agent", "COMPACTD_AGENT", "")
    if not who:
        raise ValueError("no agent id: set COMPACTD_AGENT (and COMPACTD_TOKEN if it has one) or --agent")
    return Identity(
        endpoint=pick("socket", "COMPACTD_SOCKET", default_endpoint),
        agent=who,
        token=pick("token", "COMPACTD_TOKEN", ""),
        session=pick("session", "COMPACTD_SESSION", "default"),
    )


class ArchiveReader:
    """One reader link to the daemon, opened on first use (the server starts without a daemon)."""

    def __init__(self, who: Identity, make: Callable[[Identity], AgentLink] | None = None) -> None:
        self.who = who
        self._make = make or _reader_link
        self._link: AgentLink | None = None

    async def link(self) -> AgentLink:
        if self._link is None:
            link = self._make(self.who)
            try:
                await link.connect()
            except LinkError as exc:
                raise ToolError(f"compactd refused or did not answer ({exc}); is it running?") from None
            self._link = link
        return self._link

    async def ask(self, what: dict[str, Any]) -> dict[str, Any]:
        link = await self.link()
        try:
            return await link.request({"t": T.RECALL, **what})
        except LinkError as exc:
            raise ToolError(str(exc)) from None

    async def close(self) -> None:
        if self._link is not None:
            await self._link.close()
            self._link = None


def _reader_link(who: Identity) -> AgentLink:
    return AgentLink(who.endpoint, who.agent, 1000, token=who.token, session=who.session, reader=True)


def build(who: Identity, make: Callable[[Identity], AgentLink] | None = None) -> MCPServer:
    """The MCP server for ``who`` (not yet running: ``server.run("stdio")``)."""
    reader = ArchiveReader(who, make)
    server = MCPServer(
        "compactd",
        instructions=(
            "compactd replaced older parts of your context with digests. A digest's header names an "
            "archive reference (e.g. 'recall a17'); call recall with it to read the originals, "
            "search to find text in them, expand with a section or digest id."
        ),
    )

    @server.tool()
    async def recall(ref: str, offset: int = 0) -> str:
        """The original sections a compactd digest replaced. ref: the digest's archive reference
        ('a17'), or 'a17#m3' for one section of it. Long answers come in pages: pass the offset
        the answer names to read on."""
        base, _, only = ref.strip().partition("#")
        reply = await reader.ask({"refs": [base], "offset": offset, "max_bytes": PAGE_BYTES})
        return render_items(reply, only) or f"archive {base} holds no sections"

    @server.tool()
    async def search(query: str, offset: int = 0) -> str:
        """Search the text of everything compactd archived for you (case-insensitive), newest
        first. Each hit names the archive reference and section to recall."""
        reply = await reader.ask({"query": query, "offset": offset, "limit": SEARCH_HITS})
        hits = reply.get("hits", [])
        if not hits:
            return f"no archived text matches {query!r}"
        lines = [f"{h.get('ref')}#{h.get('section')} [{h.get('kind')}]: {h.get('snippet')}" for h in hits]
        nxt = reply.get("next_offset")
        if isinstance(nxt, int):
            lines.append(f"[more: call again with offset={nxt}]")
        return "\n".join(lines)

    @server.tool()
    async def expand(section_id: str, offset: int = 0) -> str:
        """The archived original of a section id, or every original a digest id (compactd-d…)
        replaced."""
        reply = await reader.ask({"sections": [section_id], "offset": offset, "max_bytes": PAGE_BYTES})
        return render_items(reply)

    return server


def main(argv: list[str], default_endpoint: str) -> int:
    """``compactd mcp [--agent ID] [--config FILE]``: serve MCP on stdin/stdout until EOF."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="compactd mcp", description=__doc__.split("\n\n")[0])
    p.add_argument("--agent", help="agent id (default: $COMPACTD_AGENT)")
    p.add_argument("--config", metavar="FILE", help="TOML file with an [mcp] table: agent, token, socket")
    args = p.parse_args(argv)
    try:
        who = identity(default_endpoint, config=args.config, agent=args.agent)
    except (OSError, ValueError, tomllib.TOMLDecodeError) as exc:
        print(f"compactd mcp: {exc}", file=sys.stderr)
        return 1
    build(who).run("stdio")
    return 0
