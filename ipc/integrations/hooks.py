"""``compactd hook post-tool|pre-compact|session-start``: Claude Code hooks (JSON on stdin, JSON on
stdout, exit 0), for ONE agent identity (``COMPACTD_AGENT``/``COMPACTD_TOKEN``/``COMPACTD_SOCKET``,
as ``compactd mcp``; both attach as readers, never displacing the agent).

* ``post-tool`` (PostToolUse): a tool output of at least ``COMPACTD_HOOK_MIN_TOKENS`` tokens (default
  2000) is sent to the daemon (COMPRESS), which archives the original and answers with a digest;
  the hook returns ``hookSpecificOutput.updatedToolOutput``: the tool's response with its largest
  text replaced by the digest (the shape is kept: Bash's is an object with ``stdout``). The digest
  names its archive reference; the model recalls the original with the MCP tool ``recall``.
* ``pre-compact`` (PreCompact): notes that Claude Code compacts this session (nothing to output).
* ``session-start`` (SessionStart): when ``source`` is ``compact``, returns
  ``hookSpecificOutput.additionalContext`` listing the digests compactd made in this session, so the
  references survive Claude Code's own summary.

The hooks never break a session: when the daemon is unreachable or anything fails, they print
nothing, say why on stderr and exit 0 (Claude Code then keeps the tool output as it was).
What a session's hooks compressed is listed in ``$XDG_STATE_HOME/compactd/hooks/<session>.jsonl``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from ipc.client import AgentLink, LinkError

MIN_TOKENS = 2000
TIMEOUT_S = 10.0  # per request to the daemon (a deterministic digest takes well under a second)
LISTED = 50  # digests re-injected at most, newest last


def state_file(session: str, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", session)[:128] or "default"
    return Path(base) / "compactd" / "hooks" / f"{safe}.jsonl"


def _largest(value: Any, path: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], str]:
    """The path to the longest string inside a tool response, and that string."""
    if isinstance(value, str):
        return path, value
    best: tuple[tuple[Any, ...], str] = ((), "")
    items = (
        value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    )
    for key, sub in items:
        found = _largest(sub, (*path, key))
        if len(found[1]) > len(best[1]):
            best = found
    return best


def _replace(value: Any, path: tuple[Any, ...], text: str) -> Any:
    if not path:
        return text
    head, rest = path[0], path[1:]
    if isinstance(value, Mapping):
        out = {k: v for k, v in value.items() if k not in ("persistedOutputPath", "persistedOutputSize")}
        out[head] = _replace(value[head], rest, text)
        return out
    copy = list(value)
    copy[head] = _replace(copy[head], rest, text)
    return copy


async def _compress(
    endpoint: str, agent: str, token: str, session: str, text: str, label: str, min_tokens: int
) -> dict[str, Any]:
    link = AgentLink(
        endpoint,
        agent,
        1000,
        token=token,
        session=session,
        reader=True,
        heartbeat=False,
        reattach=False,
        timeout_s=TIMEOUT_S,
    )
    await link.connect()
    try:
        return await link.compress(text, label=label, min_tokens=min_tokens)
    finally:
        await link.close()


def post_tool(payload: Mapping[str, Any], env: Mapping[str, str], endpoint: str) -> dict[str, Any]:
    response = payload.get("tool_response")
    path, text = _largest(response)
    min_tokens = int(env.get("COMPACTD_HOOK_MIN_TOKENS") or MIN_TOKENS)
    if len(text) < min_tokens:  # fewer characters than tokens wanted: surely too small
        return {}
    session = str(payload.get("session_id") or "default")[:128]
    if endpoint.startswith("ipc://") and not Path(endpoint[len("ipc://") :]).exists():
        raise OSError(f"no daemon socket at {endpoint}")  # fail at once: Claude Code waits for us
    reply = asyncio.run(
        _compress(
            endpoint,
            env["COMPACTD_AGENT"],
            env.get("COMPACTD_TOKEN", ""),
            session,
            text,
            str(payload.get("tool_name") or "")[:128],
            min_tokens,
        )
    )
    if not reply.get("compressed"):
        return {}
    note = {
        "ref": reply["ref"],
        "tool": payload.get("tool_name"),
        "tokens_before": reply["tokens_before"],
        "digest": reply["text"][:2000],
    }
    dest = state_file(session, env)
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with dest.open("a", encoding="utf-8") as f:
        f.write(json.dumps(note) + "\n")
    return {
        "hookSpecificOutput": {
            "hookEventName": "PostToolUse",
            "updatedToolOutput": _replace(response, path, reply["text"]),
        }
    }


def session_start(payload: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    if payload.get("source") != "compact":
        return {}
    dest = state_file(str(payload.get("session_id") or "default"), env)
    if not dest.is_file():
        return {}
    notes = [json.loads(line) for line in dest.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not notes:
        return {}
    lines = [
        f"compactd archived {len(notes)} large tool output(s) of this session; the originals stay "
        "recallable with the compactd MCP tool recall(ref). Digests, oldest first:"
    ]
    for n in notes[-LISTED:]:
        lines.append(f"- {n['ref']} ({n.get('tool')}, {n.get('tokens_before')} tokens): {n['digest'][:600]}")
    return {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "\n".join(lines)}}


def run(event: str, stdin: IO[str], env: Mapping[str, str], endpoint: str) -> dict[str, Any]:
    payload = json.loads(stdin.read() or "{}")
    if not isinstance(payload, dict):
        raise ValueError("the hook input must be a JSON object")
    if event == "post-tool":
        return post_tool(payload, env, env.get("COMPACTD_SOCKET") or endpoint)
    if event == "session-start":
        return session_start(payload, env)
    if event == "pre-compact":
        return {}
    raise ValueError(f"unknown hook {event!r}: post-tool, pre-compact or session-start")


def main(argv: list[str], default_endpoint: str) -> int:
    """``compactd hook EVENT``; always exit 0 unless the command line itself is wrong."""
    if len(argv) != 1 or argv[0] not in ("post-tool", "pre-compact", "session-start"):
        print("usage: compactd hook post-tool|pre-compact|session-start  (JSON on stdin)", file=sys.stderr)
        return 2
    try:
        out = run(argv[0], sys.stdin, os.environ, default_endpoint)
    except (LinkError, OSError, ValueError, KeyError) as exc:
        print(f"compactd hook {argv[0]}: {exc} (output left as it was)", file=sys.stderr)
        return 0
    if out:
        sys.stdout.write(json.dumps(out) + "\n")
    return 0
