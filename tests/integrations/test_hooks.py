"""compactd hook: Claude Code's hook payloads (PostToolUse, PreCompact, SessionStart) on stdin of a
real `compactd hook` process, a real daemon; the original of a compressed output recalled via mcp."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from watcher.eval.bench.adapters import Chat
from watcher.eval.harness import DaemonProcess


def hook(event: str, payload: dict[str, Any], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "watcher", "hook", event],
        input=json.dumps(payload),
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env},
        timeout=60,
    )


def bash_payload(session: str, stdout: str) -> dict[str, Any]:
    """A PostToolUse input as Claude Code's hook documentation gives it, for the Bash tool."""
    return {
        "session_id": session,
        "transcript_path": f"/home/u/.claude/projects/p/{session}.jsonl",
        "cwd": "/home/u/p",
        "permission_mode": "default",
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q", "description": "Run the tests"},
        "tool_response": {
            "stdout": stdout,
            "stderr": "warning: slow",
            "interrupted": False,
            "isImage": False,
        },
        "tool_use_id": "toolu_01ABC",
    }


async def test_post_tool_compresses_archives_and_session_start_reinjects(
    token_daemon: DaemonProcess,
    turns: list[list[Chat]],
    tokens: dict[str, str],
    mcp_client: Any,
    tmp_path: Path,
) -> None:
    env = {
        "COMPACTD_AGENT": "alpha",
        "COMPACTD_TOKEN": tokens["alpha"],
        "COMPACTD_SOCKET": token_daemon.endpoint,
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    outputs = sorted((m["content"] for t in turns for m in t if m["role"] == "tool"), key=len)
    big, small = outputs[-1], outputs[0]
    assert len(big) > 8_000  # about 3500 tokens: above the 2000-token default

    done = hook("post-tool", bash_payload("s1", big), env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)["hookSpecificOutput"]
    assert out["hookEventName"] == "PostToolUse"
    updated = out["updatedToolOutput"]
    assert updated["stderr"] == "warning: slow" and updated["interrupted"] is False  # the shape is kept
    digest = updated["stdout"]
    assert digest.startswith("[compactd digest") and len(digest) < len(big) / 2
    ref = digest.split("archived as ", 1)[1].split(";", 1)[0].split()[0]

    # the original is in the agent's archive, in full, through the MCP server
    assert big in await mcp_client(token_daemon.endpoint, "alpha", tokens["alpha"]).recall_all(ref)
    ((err, text),) = await mcp_client(token_daemon.endpoint, "beta", tokens["beta"]).calls(
        [("recall", {"ref": ref})]
    )
    assert err and "not_found" in text

    # small outputs pass through untouched; PreCompact says nothing
    small_run = hook("post-tool", bash_payload("s1", small), env)
    assert small_run.returncode == 0 and small_run.stdout == ""
    pre = hook("pre-compact", {"session_id": "s1", "hook_event_name": "PreCompact", "trigger": "auto"}, env)
    assert pre.returncode == 0 and pre.stdout == ""

    # after Claude Code compacts, the session starts again with the digests compactd made
    start = {"session_id": "s1", "hook_event_name": "SessionStart", "source": "compact"}
    again = json.loads(hook("session-start", start, env).stdout)["hookSpecificOutput"]
    assert again["hookEventName"] == "SessionStart" and ref in again["additionalContext"]
    assert hook("session-start", {**start, "source": "startup"}, env).stdout == ""
    assert hook("session-start", {**start, "session_id": "other"}, env).stdout == ""


def test_hooks_never_break_the_session(tmp_path: Path, tokens: dict[str, str]) -> None:
    env = {
        "COMPACTD_AGENT": "alpha",
        "COMPACTD_TOKEN": tokens["alpha"],
        "COMPACTD_SOCKET": f"ipc://{tmp_path}/nobody.sock",
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    env_fast = {**env}
    done = hook("post-tool", bash_payload("s2", "x" * 50_000), env_fast)
    assert done.returncode == 0 and done.stdout == "" and "left as it was" in done.stderr
    bad = hook("post-tool", {"tool_response": "y" * 10}, {**env, "COMPACTD_AGENT": ""})
    assert bad.returncode == 0 and bad.stdout == ""
    assert hook("nonsense", {}, env).returncode == 2
