"""A RECALLED reply as text for a model to read: used by the MCP server's tools
(ipc.integrations.mcp_server) and the proxy's in-band recall tool (ipc.proxy.recall)."""

from __future__ import annotations

from typing import Any

PAGE_BYTES = 24_000  # one tool answer: about 6k tokens of originals


def render_items(reply: dict[str, Any], only: str = "") -> str:
    """The archived sections of ``reply`` (``only``: one section id of them), with the next page's
    offset when there is one; "" when it holds no sections."""
    out: list[str] = []
    for item in reply.get("items", []):
        head = f"== archive {item.get('ref')} (session {item.get('session')})"
        if item.get("evicted"):
            out.append(f"{head}: evicted ({item['evicted']})")
            continue
        out.append(head)
        for sec in item.get("sections", []):
            if only and sec.get("id") != only:
                continue
            role = f" {sec['role']}" if sec.get("role") else ""
            out.append(f"--- {sec.get('id')} [{sec.get('kind')}{role}]\n{sec.get('text', '')}")
    nxt = reply.get("next_offset")
    if isinstance(nxt, int):
        out.append(f"[more: call again with offset={nxt}]")
    return "\n".join(out)
