"""Conversations through the proxy to a real daemon and a real llama-server: digests replace old
messages in later requests, the requests stay valid (tool pairs, system prompt, cache_control),
the same history gives the same bytes, and the upstream accepts every request."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from ipc.proxy.app import Proxy
from tests.ipc.proxy.conftest import proxy_settings
from watcher.eval.bench.llama_server import ModelServer
from watcher.eval.harness import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # model servers: slow under load


DIGEST_PREFIX = "[compactd digest"  # every digest message starts so
WINDOW = 800  # proxy-estimated tokens: a few turns of ~90 fill it


def _output(i: int) -> str:
    lines = [
        f"    {j:3d}  def handler_{i}_{j}(request): return compute({i}, {j}, request.args)" for j in range(6)
    ]
    return f"$ sed -n 1,6p src/module_{i}.py\n" + "\n".join(lines)


def openai_turn(i: int) -> list[dict[str, Any]]:
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "shell", "arguments": json.dumps({"cmd": f"cat module_{i}.py"})},
    }
    return [
        {"role": "assistant", "content": f"Looking at module {i}.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": _output(i)},
    ]


def anthropic_turn(i: int) -> list[dict[str, Any]]:
    use = {"type": "tool_use", "id": f"toolu_{i}", "name": "shell", "input": {"cmd": f"cat module_{i}.py"}}
    result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": _output(i)}
    return [
        {"role": "assistant", "content": [{"type": "text", "text": f"Looking at module {i}."}, use]},
        {"role": "user", "content": [result]},
    ]


def _with_marker(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude Code style: a cache_control marker on the last block of the last message only."""
    out = json.loads(json.dumps(messages))
    last = out[-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


def start(api: str, base: str) -> tuple[str, list[dict[str, Any]]]:
    """The chat URL of ``api`` on the proxy at ``base`` and a conversation's first messages."""
    task = {"role": "user", "content": "Find the bug in the request handlers."}
    if api == "openai":
        return base + "/v1/chat/completions", [{"role": "system", "content": "You are a coding agent."}, task]
    return base + "/v1/messages", [task]


def check_openai_body(body: dict[str, Any]) -> None:
    msgs = body["messages"]
    assert msgs[0]["role"] == "system"
    open_calls: set[str] = set()
    for m in msgs:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, "a tool result without its call"
            open_calls.discard(m["tool_call_id"])
            continue
        assert not open_calls, "a tool call without its result"
        open_calls = {c["id"] for c in m.get("tool_calls") or []}


def check_anthropic_body(body: dict[str, Any], sent: dict[str, Any]) -> None:
    assert body["system"] == sent["system"]  # system prompt (and its cache_control) untouched
    msgs = body["messages"]
    assert msgs[0]["role"] == "user"
    calls: set[str] = set()
    for m in msgs:
        blocks = m["content"] if isinstance(m["content"], list) else []
        results = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
        assert results == calls, "tool_use / tool_result not adjacent"
        calls = {b["id"] for b in blocks if b.get("type") == "tool_use"}
    assert json.dumps(body).count("cache_control") == json.dumps(sent).count("cache_control")


async def _settle(proxy: Proxy) -> None:
    """Wait until the daemon has answered what the last request sent (a proposal, or nothing).
    A conversation's link connects in the background (a request never waits for it): until it
    has, the daemon has seen nothing, so wait for it first."""
    for conv in proxy.conversations:
        for _ in range(600):
            if conv.link is not None or conv.broken:
                break
            await asyncio.sleep(0.05)
        if conv.link is None:
            continue
        for _ in range(600):
            agent = (await conv.link.status())["agents"][0]
            if not agent["compacting"]:
                break
            try:  # await the real event: a proposal arriving
                p = await asyncio.wait_for(conv.link.proposals.get(), 0.1)
            except TimeoutError:
                continue
            conv.link.proposals.put_nowait(p)
            break


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_digests_go_into_later_requests(
    api: str, request: pytest.FixtureRequest, daemon: DaemonProcess
) -> None:
    # llama-server for both formats here: its prompt cache keeps 14 growing requests cheap
    upstream: ModelServer = request.getfixturevalue("anthropic_upstream")
    settings = proxy_settings(upstream.url, daemon.endpoint, window=WINDOW)
    async with Proxy(settings) as proxy, aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{proxy.port}"
        system = [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}]
        url, history = start(api, base)
        sent_bodies: list[dict[str, Any]] = []
        for i in range(14):
            if i:
                history += openai_turn(i) if api == "openai" else anthropic_turn(i)
            body: dict[str, Any] = {"model": "smollm2", "max_tokens": 1, "messages": history}
            if api == "anthropic":
                body = {**body, "system": system, "messages": _with_marker(history)}
            async with http.post(
                url, json=body, headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}
            ) as r:
                assert r.status == 200, await r.text()  # the upstream accepted it
            sent_bodies.append(body)
            await _settle(proxy)
        bodies = [json.loads(b) for _, b in proxy.sent]
        assert len(bodies) == 14 and len({name for name, _ in proxy.sent}) == 1  # one conversation
        with_digest = [b for b in bodies if DIGEST_PREFIX in json.dumps(b)]
        assert with_digest, f"no digest reached the upstream: {proxy.status()} {daemon.log_tail()}"
        for b, sent in zip(bodies, sent_bodies, strict=True):
            if api == "openai":
                check_openai_body(b)
            else:
                check_anthropic_body(b, sent)
        conv = proxy.status()["conversations"][0]
        assert conv["digests"] >= 1 and conv["tokens_upstream"] <= WINDOW
        # the same history again: unless a digest went on the wire in between, the same bytes
        before = _wired(proxy)
        async with http.post(url, json=sent_bodies[-1], headers={"anthropic-version": "2023-06-01"}) as r:
            assert r.status == 200
        if _wired(proxy) == before:
            assert proxy.sent[-1][1] == proxy.sent[-2][1]


def _wired(proxy: Proxy) -> float:
    get = proxy.metrics.registry.get_sample_value
    return sum(
        get("compactd_proxy_digests_applied_total", {"rule": r}) or 0 for r in ("free", "worth", "needed")
    )


async def test_a_resumed_conversation_tells_the_daemon_its_largest_turn(
    anthropic_upstream: ModelServer, daemon: DaemonProcess
) -> None:
    """A conversation the proxy first sees mid-session (its whole history in the first request) is
    sent to the daemon as one SNAPSHOT: the look-ahead counts its sections as turns, so a large tool
    output a few turns back is the agent's largest turn lately before it has taken one of its own
    (watcher.planning.lookahead, Lookahead.history; it was 0 before stop 42)."""
    async with Proxy(proxy_settings(anthropic_upstream.url, daemon.endpoint)) as proxy:
        async with aiohttp.ClientSession() as http:
            url, history = start("openai", f"http://127.0.0.1:{proxy.port}")
            for i in range(1, 7):
                turn = openai_turn(i)
                if i == 4:  # a long test log
                    turn[1]["content"] = "\n".join(_output(i) for _ in range(12))
                history += turn
            body = {"model": "smollm2", "max_tokens": 1, "messages": history}
            async with http.post(url, json=body) as r:
                assert r.status == 200, await r.text()
            await _settle(proxy)
        link = next(iter(proxy.conversations)).link
        assert link is not None
        agent = (await link.status())["agents"][0]
        sizes = [s.tokens for s in link.context if s.kind != "system"]
        big = max(sizes)
        after = len(sizes) - 1 - sizes.index(big)  # sections after the long log: each a turn that fades it
        others = sorted(sizes)[-2]
        assert big > 3 * others and after >= 4, sizes
        assert agent["lookahead"]["largest_turn_tokens"] == round(big * 0.95**after) > others, (agent, sizes)
