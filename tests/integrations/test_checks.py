"""The checks the adapter tests and `compactd bench adapters` rely on can fail."""

from __future__ import annotations

import pytest

from watcher.eval.bench.adapters import Chat, check_request, request_tokens

CALL = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}


def test_check_request_refuses_what_providers_refuse() -> None:
    ok: list[Chat] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
        {"role": "user", "content": "[compactd digest] ..."},
    ]
    assert check_request(ok) == ""
    assert "orphan" in check_request([ok[0], ok[3]])
    assert "no result" in check_request([*ok[:3], ok[4]])
    assert "invalid role" in check_request([{"role": "exit", "content": ""}])


def test_chat_turns_pair_every_call_with_its_result(turns: list[list[Chat]]) -> None:
    flat = [m for t in turns for m in t]
    assert check_request(flat) == ""
    assert all(len(m.get("tool_calls") or []) == 1 for m in flat if m["role"] == "assistant")
    assert request_tokens(flat) > 2 * 20_000  # the window the adapter tests use must overflow


def test_bench_adapters_names_an_unknown_adapter(capsys: pytest.CaptureFixture[str]) -> None:
    from watcher.cli import main

    assert main(["bench", "adapters", "--adapters", "langchain:state,nope:x"]) == 2
    err = capsys.readouterr().err
    assert "unknown nope:x" in err and "openhands:condenser" in err
