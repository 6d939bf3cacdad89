"""model.backend = "openai" on a real daemon (no local model): digests come from a real HTTP server in
this process; when it fails, compaction goes on with deterministic digests and STATUS says the
remote is degraded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ipc.client import AgentLink
from ipc.sections import Section
from summarizer.tokenizer import load_counter
from watcher.eval.harness import DaemonProcess

CONFIG = (
    '[model]\nbackend = "openai"\nurl = "{url}"\nretries = 1\ngists = true\n[compaction]\nlookahead = false\n'
)
PROSE = (
    "We agreed to keep the old behaviour for now. The cache is rebuilt at startup, which is slow but "
    "safe. Later we can make the rebuild lazy, once the tests cover the edge cases that broke last time."
)
GIST = {"choices": [{"message": {"content": "The agent kept the old behaviour."}, "finish_reason": "stop"}]}


class Remote:
    """A real HTTP server on loopback answering every request with ``status`` and ``body``."""

    def __init__(self, status: int, body: str) -> None:
        self.status, self.body, self.requests = status, body.encode(), 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                size = [
                    int(h.split(b":")[1])
                    for h in head.split(b"\r\n")
                    if h.lower().startswith(b"content-length")
                ]
                await reader.readexactly(size[0] if size else 0)
                self.requests += 1
                line = f"HTTP/1.1 {self.status} X\r\nContent-Length: {len(self.body)}"
                writer.write(line.encode() + b"\r\n\r\n" + self.body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture(scope="module")
def count(model_path: str) -> Callable[[str], int]:
    return load_counter(model_path)


async def compact(tmp_path: Path, remote: Remote, count: Callable[[str], int]) -> tuple[Any, dict[str, Any]]:
    url = await remote.start()
    cfg = tmp_path / "compactd.toml"
    cfg.write_text(CONFIG.format(url=url))
    daemon = DaemonProcess(tmp_path, str(cfg), model=False)
    try:
        await daemon.wait_ready(60)
        async with AgentLink(daemon.endpoint, agent="far", budget=6000, timeout_s=60) as link:
            i = 0
            while link.context.tokens < link.high_watermark:
                kind = "assistant" if i % 2 else "user"
                await link.append(Section(f"p{i}", kind, PROSE, tokens=count(PROSE)), wait=True)
                i += 1
            p = await asyncio.wait_for(link.proposals.get(), 120)
            assert await link.apply(p)
            state: dict[str, Any] = (await link.status())["daemon"]
    finally:
        assert daemon.stop() == 0
        assert remote.server is not None
        remote.server.close()
    return p, state


async def test_digests_come_from_the_remote_server(tmp_path: Path, count: Callable[[str], int]) -> None:
    remote = Remote(200, json.dumps(GIST))
    p, state = await compact(tmp_path, remote, count)
    assert p.tokens_after < p.tokens_before
    assert p.digest[0].meta["method"] == "model", p.digest[0].meta
    assert "kept the old behaviour" in p.digest[0].text
    summ = state["summarizer"]
    assert remote.requests >= 1 and summ["remote_requests"] == remote.requests, summ
    assert summ["remote_degraded"] == 0 and summ["remote_fallbacks"] == 0


async def test_a_failing_remote_loses_nothing(tmp_path: Path, count: Callable[[str], int]) -> None:
    remote = Remote(500, '{"error": "overloaded"}')
    p, state = await compact(tmp_path, remote, count)
    assert p.tokens_after < p.tokens_before  # compaction went on, deterministically
    assert p.digest[0].meta["method"] == "deterministic", p.digest[0].meta
    summ = state["summarizer"]
    assert remote.requests == 2 and summ["remote_retries"] == 1, summ  # one retry, then given up
    assert summ["remote_degraded"] == 1 and summ["remote_failures"] == 1
