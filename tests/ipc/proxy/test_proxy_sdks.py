"""The openai and anthropic SDKs through the proxy to real model servers (llama-cpp-python's
for OpenAI, llama.cpp's llama-server for Anthropic), streaming and not."""

from __future__ import annotations

import logging

import aiohttp
import anthropic
import openai
import pytest

from ipc.proxy.app import Proxy

pytestmark = pytest.mark.slow  # model servers


SECRET = "sk-test-never-logged-7f3a"


def _base(proxy: Proxy) -> str:
    return f"http://127.0.0.1:{proxy.port}"


async def test_openai_sdk_both_ways(openai_proxy: Proxy, caplog: pytest.LogCaptureFixture) -> None:
    proxy = openai_proxy
    caplog.set_level(logging.DEBUG)
    client = openai.AsyncOpenAI(base_url=_base(proxy) + "/v1", api_key=SECRET, max_retries=0)
    history = [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "Name a colour."},
    ]
    first = await client.chat.completions.create(model="smollm2", messages=history, max_tokens=4)  # type: ignore[arg-type]
    assert first.choices[0].message.role == "assistant"
    assert first.usage is not None and first.usage.prompt_tokens > 0
    history += [{"role": "assistant", "content": first.choices[0].message.content or ""}]
    history += [{"role": "user", "content": "Another one."}]
    chunks = [
        c
        async for c in await client.chat.completions.create(
            model="smollm2",
            messages=history,  # type: ignore[arg-type]
            max_tokens=4,
            stream=True,
        )
    ]
    assert chunks and chunks[-1].choices[0].finish_reason in ("length", "stop")
    models = await client.models.list()  # another path: forwarded unchanged
    assert any(m.id == "smollm2" for m in models.data)
    status = proxy.status()
    assert len(status["conversations"]) == 1  # the second request continued the first
    conv = status["conversations"][0]
    assert conv["messages"] == 4 and conv["api"] == "openai"
    assert SECRET not in caplog.text
    assert "conversation=proxy-" in caplog.text  # one log line per request


async def test_anthropic_sdk_both_ways(anthropic_proxy: Proxy, caplog: pytest.LogCaptureFixture) -> None:
    proxy = anthropic_proxy
    caplog.set_level(logging.DEBUG)
    client = anthropic.AsyncAnthropic(base_url=_base(proxy), api_key=SECRET, max_retries=0)
    messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Name a colour."}]
    first = await client.messages.create(model="smollm2", max_tokens=4, system="One word.", messages=messages)
    assert first.type == "message" and first.role == "assistant"
    text = "".join(b.text for b in first.content if b.type == "text")
    messages += [{"role": "assistant", "content": text or "red"}, {"role": "user", "content": "Another."}]
    events = [
        e.type
        async for e in await client.messages.create(
            model="smollm2", max_tokens=4, system="One word.", messages=messages, stream=True
        )
    ]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    conv = proxy.status()["conversations"]
    assert len(conv) == 1 and conv[0]["messages"] == 3 and conv[0]["api"] == "anthropic"
    assert SECRET not in caplog.text


async def test_bad_input_gets_api_errors(openai_proxy: Proxy) -> None:
    base = _base(openai_proxy)
    async with aiohttp.ClientSession() as http:
        async with http.post(base + "/v1/chat/completions", data=b"{oops") as r:
            assert r.status == 400
            body = await r.json()
            assert body["error"]["type"] == "invalid_request_error" and "JSON" in body["error"]["message"]
        async with http.post(base + "/v1/messages", data=b'{"model": "x", "messages": 7}') as r:
            assert r.status == 400
            body = await r.json()
            assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        async with http.get(base + "/v1/no-such-path") as r:  # forwarded: the upstream's answer
            assert r.status == 404
        huge = (
            b'{"model": "smollm2", "max_tokens": 1, "messages": [{"role": "user", "content": "'
            + (b"lorem ipsum " * (20 * 1024 * 1024 // 12))
            + b'"}]}'
        )
        assert len(huge) > 20_000_000
        async with http.post(
            base + "/v1/messages", data=huge, headers={"anthropic-version": "2023-06-01"}
        ) as r:
            assert r.status == 400
            body = await r.json()
            assert body["type"] == "error" and "too long" in body["error"]["message"]
        # nothing broke: the next request goes through
        ok = {"model": "smollm2", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
        async with http.post(base + "/v1/chat/completions", json=ok) as r:
            assert r.status == 200, await r.text()
