"""``--recall-tool``: the model calls compactd_recall, the proxy answers it (from the daemon's archive,
or an elided message from its own copy) and continues the turn upstream; the agent sees only the
final answer. The 135M model does not call tools reliably, so the upstream here is a small real
HTTP server (aiohttp) that scripts the call and checks the follow-up; llama-server is asked once
that the tools field is accepted."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ipc.proxy import recall
from ipc.proxy.app import Proxy
from tests.ipc.proxy.conftest import proxy_settings
from tests.ipc.proxy.test_proxy_compaction import WINDOW, _settle, anthropic_turn, openai_turn
from tests.ipc.proxy.test_proxy_fit import WINDOW as FIT_WINDOW
from watcher.eval.bench.llama_server import ModelServer
from watcher.eval.harness import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
REFS = (re.compile(r"archived as (a\d+)"), re.compile(r"elided \d+ earlier messages (\S+?)\.\."))


class Scripted:
    """A provider that calls compactd_recall whenever it is offered and a reference is in sight,
    then answers in text once the tool result is back; it keeps every body it got."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.asked: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        api = "anthropic" if request.path == "/v1/messages" else "openai"
        offered = any(recall.NAME in json.dumps(t) for t in body.get("tools", []))
        last = json.dumps(body["messages"][-1])
        found = [m.group(1) for r in REFS if (m := r.search(json.dumps(body["messages"])))]
        if offered and found and "recall_1" not in last:
            ref = found[0]  # an archive reference if there is one, else an elided id
            self.asked.append(ref)
            return web.json_response(_call(api, ref))
        return web.json_response(_text(api, "the answer"))


def _call(api: str, ref: str) -> dict[str, Any]:
    if api == "anthropic":
        use = {"type": "tool_use", "id": "recall_1", "name": recall.NAME, "input": {"ref": ref}}
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [use],
                "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}}  # fmt: skip
    call = {"id": "recall_1", "type": "function",
            "function": {"name": recall.NAME, "arguments": json.dumps({"ref": ref})}}  # fmt: skip
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"id": "c1", "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}  # fmt: skip


def _text(api: str, text: str) -> dict[str, Any]:
    if api == "anthropic":
        return {"id": "msg_2", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 1, "output_tokens": 1}}  # fmt: skip
    return {"id": "c2", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}]}  # fmt: skip


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[Scripted, str]]:
    s = Scripted()
    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/{tail:.*}", s.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield s, f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def _conversation(proxy: Proxy, api: str, turns: int, settle: bool) -> list[dict[str, Any]]:
    base = f"http://127.0.0.1:{proxy.port}"
    url = base + ("/v1/messages" if api == "anthropic" else "/v1/chat/completions")
    history: list[dict[str, Any]] = [{"role": "user", "content": "Find the bug in the request handlers."}]
    answers = []
    async with aiohttp.ClientSession() as http:
        for i in range(turns):
            if i:
                history += openai_turn(i) if api == "openai" else anthropic_turn(i)
            body = {"model": "smollm2", "max_tokens": 16, "messages": history}
            async with http.post(url, json=body, headers=HEADERS) as r:
                assert r.status == 200, await r.text()
                answers.append(await r.json())
            if settle:
                await _settle(proxy)
    return answers


def _result_text(api: str, body: dict[str, Any]) -> str:
    last = body["messages"][-1]
    if api == "anthropic":
        (block,) = [b for b in last["content"] if b.get("type") == "tool_result"]
        assert block["tool_use_id"] == "recall_1"
        return str(block["content"])
    assert last["role"] == "tool" and last["tool_call_id"] == "recall_1"
    return str(last["content"])


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_recall_from_the_archive_is_invisible_to_the_agent(
    api: str, scripted: tuple[Scripted, str], daemon: DaemonProcess
) -> None:
    upstream, url = scripted
    async with Proxy(proxy_settings(url, daemon.endpoint, window=WINDOW, recall_tool=True)) as proxy:
        answers = await _conversation(proxy, api, 14, settle=True)
    assert upstream.asked, f"no digest reached the upstream: {proxy.status()}"
    # an archive reference from a digest's header; an elided id may come first when the daemon's
    # digest was late and the proxy fitted the window by eliding (a loaded machine): the k-th call
    # is answered in the k-th follow-up
    archived = [k for k, ref in enumerate(upstream.asked) if ref.startswith("a")]
    assert archived, f"no archive reference was recalled: {upstream.asked}"
    follows = [i for i, b in enumerate(upstream.bodies) if recall.NAME in json.dumps(b["messages"][-2:])]
    assert len(follows) == len(upstream.asked), (follows, upstream.asked)
    i = follows[archived[0]]
    follow = upstream.bodies[i]
    text = _result_text(api, follow)
    assert "def handler_" in text and "== archive" in text  # the originals, from the daemon
    assert follow["messages"][:-2] == upstream.bodies[i - 1]["messages"]  # the same request, continued
    for a in answers:  # the agent never sees a compactd_recall call
        assert recall.NAME not in json.dumps(a)
    assert proxy.metrics.recalls._value.get() >= 1


async def test_recall_of_an_elided_message_without_a_daemon(
    scripted: tuple[Scripted, str], tmp_path: Path
) -> None:
    upstream, url = scripted
    settings = proxy_settings(url, f"ipc://{tmp_path}/nobody.sock", window=FIT_WINDOW, recall_tool=True)
    async with Proxy(settings) as proxy:
        answers = await _conversation(proxy, "anthropic", 12, settle=False)
        # a streaming request is forwarded as it is: no tool offered
        async with aiohttp.ClientSession() as http:
            body = {
                "model": "smollm2",
                "max_tokens": 16,
                "stream": True,
                "messages": [{"role": "user", "content": "x"}],
            }
            async with http.post(
                f"http://127.0.0.1:{proxy.port}/v1/messages", json=body, headers=HEADERS
            ) as r:
                await r.read()
    assert "tools" not in upstream.bodies[-1]
    assert upstream.asked and upstream.asked[0].startswith("m")  # a section id from the elision note
    follow = next(b for b in upstream.bodies if recall.NAME in json.dumps(b["messages"][-2:]))
    assert "Looking at module" in _result_text("anthropic", follow) or "def handler_" in _result_text(
        "anthropic", follow
    )
    assert all(a["content"] == [{"type": "text", "text": "the answer"}] for a in answers)


async def test_llama_server_accepts_the_offered_tool(anthropic_upstream: ModelServer, tmp_path: Path) -> None:
    settings = proxy_settings(
        anthropic_upstream.url, f"ipc://{tmp_path}/nobody.sock", window=FIT_WINDOW, recall_tool=True
    )
    async with Proxy(settings) as proxy:
        for api in ("anthropic", "openai"):
            await _conversation(proxy, api, 9, settle=False)  # every request answered 200
        offered = [json.loads(b) for _, b in proxy.sent if b"[compactd elided" in b]
    assert offered
