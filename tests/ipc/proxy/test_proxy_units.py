"""The proxy's pure parts: wire formats, identity, cache rules, windows."""

from __future__ import annotations

import json

import pytest

from ipc.proxy import identity, rules, wire
from ipc.proxy.windows import Windows, parse_override

BODY = (
    b'{"model": "claude-sonnet-4-5", "max_tokens": 64, "system": [{"type": "text", "text": "be brief",'
    b' "cache_control": {"type": "ephemeral"}}], "messages": [{"role": "user", "content": "hi \\u00e9"},'
    b' {"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}], "stream": true}'
)


def test_parse_keeps_raw_values_and_rebuild_changes_only_messages() -> None:
    req = wire.parse("anthropic", BODY)
    assert req.model == "claude-sonnet-4-5" and req.stream and len(req.messages) == 3
    assert bytes(req.messages[0]) == b'{"role": "user", "content": "hi \\u00e9"}'  # the client's own bytes
    digest = wire.digest_message("anthropic", "[compactd digest] summary")
    out = wire.rebuild(req, [digest, req.messages[2]])
    back = json.loads(out)
    assert list(back) == ["model", "max_tokens", "system", "messages", "stream"]  # order kept
    assert back["system"] == json.loads(BODY)["system"]  # system and its cache_control untouched
    assert back["messages"][1] == {"role": "user", "content": "more"}
    assert b'"hi \\u00e9"' not in out and b'{"role": "user", "content": "more"}' in out
    assert wire.rebuild(req, [digest, req.messages[2]]) == out  # deterministic


@pytest.mark.parametrize(
    ("body", "status"),
    [(b"{not json", 400), (b"[1, 2]", 400), (b'{"model": "m"}', 400), (b'{"messages": 3}', 400)],
)
def test_malformed_bodies_are_wire_errors(body: bytes, status: int) -> None:
    with pytest.raises(wire.WireError) as err:
        wire.parse("openai", body)
    assert err.value.status == status


def test_error_formats() -> None:
    assert json.loads(wire.error_body("openai", 400, "bad"))["error"] == {
        "message": "bad",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    assert json.loads(wire.error_body("anthropic", 413, "big")) == {
        "type": "error",
        "error": {"type": "request_too_large", "message": "big"},
    }
    event = wire.error_event("anthropic", "gone")
    assert event.startswith(b"event: error\ndata: ") and event.endswith(b"\n\n")
    assert wire.error_event("openai", "gone").startswith(b"data: {")


def test_identity_ignores_moved_cache_control_and_whitespace() -> None:
    keys = identity.Keys()
    plain = b'{"role":"user","content":[{"type":"text","text":"x"}]}'
    marked = (
        b'{"content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}], '
        b'"role": "user"}'
    )
    assert keys.key(plain) == keys.key(marked)
    assert keys.key(plain) == keys.key(b'{"role": "user", "content": "x"}')  # the same text block
    assert keys.key(plain) != keys.key(b'{"role":"user","content":[{"type":"text","text":"y"}]}')
    assert keys.decoded == 4
    keys.key(plain)
    assert keys.decoded == 4  # known bytes are not decoded again


def test_index_finds_the_longest_known_prefix() -> None:
    keys, index = identity.Keys(), identity.Index[str]()
    root = keys.root("openai", None)
    msgs = [json.dumps({"role": "user", "content": str(i)}).encode() for i in range(5)]
    index.add("a", keys.chain(root, msgs[:3]), 0)
    assert index.find(keys.chain(root, msgs)) == ("a", 3)
    assert index.find(keys.chain(keys.root("anthropic", None), msgs)) is None  # other API
    assert index.find(keys.chain(root, msgs[1:])) is None


def test_cache_rules() -> None:
    prev = [("system", 100), ("m1", 50), ("m2", 50), ("m3", 30)]
    assert rules.busted_tokens(prev, "m2") == 80
    assert rules.busted_tokens(prev, "m9") == 0
    policy = rules.CachePolicy(bust_ratio=1.0, apply_at=0.85)
    assert rules.decide(policy, saving=10, busted=0, tokens=10, window=100) == "free"
    assert rules.decide(policy, saving=90, busted=80, tokens=10, window=1000) == "worth"
    assert rules.decide(policy, saving=10, busted=80, tokens=10, window=1000) == ""
    assert rules.decide(policy, saving=10, busted=80, tokens=900, window=1000) == "needed"
    stats = rules.CacheStats()
    assert stats.record(prev, [*prev, ("m4", 10)], "") == (230, 230)
    assert stats.record(prev, [("system", 100), ("d1", 5), ("m3", 30)], "digest") == (100, 230)
    assert stats.kept_fraction == pytest.approx(330 / 460)
    assert stats.busts == {"digest": 1}


def test_windows_table_and_overrides() -> None:
    w = Windows({"my-model": 5000}, default=9000)
    assert w("claude-sonnet-4-5") == 200_000
    assert w("gpt-4o-mini") == 128_000 and w("gpt-4") == 8192  # longest prefix wins
    assert w("openai/gpt-4o") == 128_000
    assert w("my-model-q4") == 5000 and w("unknown") == 9000
    assert parse_override("qwen=32768") == ("qwen", 32768)
    with pytest.raises(ValueError):
        parse_override("qwen")
