"""Streams that break: an upstream that dies mid-stream, an agent that hangs up mid-stream. The
agent gets an error event in the API's format (or nothing, if it left), the daemon is unaffected
and the proxy serves the next request."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from ipc.client import AgentLink
from ipc.proxy.app import Proxy
from tests.ipc.proxy.conftest import proxy_settings
from watcher.eval.bench.llama_server import LlamaCppPythonServer, ModelServer
from watcher.eval.bench.proxy import ProxyProcess
from watcher.eval.harness import DaemonProcess

pytestmark = pytest.mark.slow  # model servers


# A long answer: SmolLM2's end tokens (<|endoftext|> 0, <|im_end|> 2) are banned.
LONG = {
    "model": "smollm2",
    "max_tokens": 2000,
    "stream": True,
    "logit_bias": {"0": -100, "2": -100},
    "messages": [{"role": "user", "content": "Count from one to a thousand, in words."}],
}


async def _daemon_answers(daemon: DaemonProcess) -> None:
    assert daemon.proc.poll() is None
    async with AgentLink(daemon.endpoint, agent="probe", budget=1000) as link:
        assert await link.ping() < 5


async def test_upstream_dies_mid_stream(tmp_path: Path, daemon: DaemonProcess) -> None:
    server = LlamaCppPythonServer(tmp_path, ctx=4096)
    try:
        await server.wait_ready()
        async with (
            Proxy(proxy_settings(server.url, daemon.endpoint)) as proxy,
            aiohttp.ClientSession() as http,
        ):
            url = f"http://127.0.0.1:{proxy.port}/v1/chat/completions"
            async with http.post(url, json=LONG) as r:
                assert r.status == 200
                first = await r.content.readany()  # an event, or an SSE ": ping" comment
                assert first
                server.proc.kill()  # the upstream dies with the stream open
                rest = await r.content.read()
            last = (first + rest).rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
            assert last.startswith(b"data: ")
            error = json.loads(last.removeprefix(b"data: "))["error"]
            assert error["type"] == "api_error" and "dropped" in error["message"]
            # the upstream is gone: the next request gets a 502 in the API's format
            async with http.post(url, json={**LONG, "stream": False, "max_tokens": 1}) as r:
                assert r.status == 502
                assert (await r.json())["error"]["type"] == "api_error"
    finally:
        server.stop()
    await _daemon_answers(daemon)


async def test_agent_hangs_up_mid_stream(openai_upstream: ModelServer, daemon: DaemonProcess) -> None:
    async with Proxy(proxy_settings(openai_upstream.url, daemon.endpoint)) as proxy:
        url = f"http://127.0.0.1:{proxy.port}/v1/chat/completions"
        async with aiohttp.ClientSession() as http:
            r = await http.post(url, json=LONG)
            assert r.status == 200
            assert await r.content.readany()  # the stream is open (an event or an SSE ping)
            r.close()  # hang up
        labels = {"api": "openai", "outcome": "client_gone"}

        def gone() -> float | None:
            return proxy.metrics.registry.get_sample_value("compactd_proxy_requests_total", labels)

        for _ in range(600):  # the proxy notices at its next write
            if gone() == 1:
                break
            await asyncio.sleep(0.05)
        assert gone() == 1
        async with aiohttp.ClientSession() as http:
            short = {**LONG, "stream": False, "max_tokens": 1}
            async with http.post(url, json=short) as r:
                assert r.status == 200, await r.text()
    await _daemon_answers(daemon)


async def test_cli_lifecycle(tmp_path: Path, openai_upstream: ModelServer, daemon: DaemonProcess) -> None:
    """`compactd proxy` serves, and SIGTERM stops it cleanly (exit 0) after a request."""
    proc = ProxyProcess(tmp_path, openai_upstream.url, daemon.endpoint, ["smollm2=32768"])
    try:
        await proc.wait_ready()
        async with aiohttp.ClientSession() as http:
            body = {"model": "smollm2", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
            async with http.post(f"{proc.url}/v1/chat/completions", json=body) as r:
                assert r.status == 200
            async with http.get(f"{proc.url}/metrics") as r:
                assert 'compactd_proxy_requests_total{api="openai",outcome="200"} 1.0' in await r.text()
    finally:
        code = await asyncio.to_thread(proc.stop)  # SIGTERM
    assert code == 0, proc.log_tail()
    assert "proxy_stopped" in proc.log_tail() and "request api=openai" in proc.log_tail()
