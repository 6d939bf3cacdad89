"""Every upstream request fits the window at any pace: when the ready digests do not suffice (turns
faster than the daemon, or no daemon at all), the proxy leaves the oldest messages out (fit.py),
in whole tool groups, behind one note; the cut is sticky (the same bytes next turn) and a real
upstream (llama-server) accepts every request and counts it within the window."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ipc.proxy import fit
from ipc.proxy.app import Proxy
from tests.ipc.proxy.conftest import proxy_settings
from tests.ipc.proxy.test_proxy_compaction import (
    anthropic_turn,
    check_anthropic_body,
    check_openai_body,
    openai_turn,
    start,
)
from watcher.eval.bench.llama_server import ModelServer
from watcher.eval.harness import DaemonProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

WINDOW = 650  # proxy-estimated tokens: a turn is ~90, so the window is outgrown by turn 7
HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


def test_run_ends_at_group_boundaries_and_stops_at_what_must_stay() -> None:
    ids = ["u", "a1", "r1", "a2", "r2", "cc", "a3", "r3"]
    group = {"a1": "g1", "r1": "g1", "a2": "g2", "r2": "g2", "a3": "g3", "r3": "g3"}
    start = fit.head_end(ids, lambda s: "")
    assert start == 1  # the task stays first
    end = fit.extend(ids, start, 1, lambda s: 10, lambda s: group.get(s, ""), lambda s: s != "cc")
    assert ids[start:end] == ["a1", "r1"]  # never half a group
    end = fit.extend(ids, start, 1000, lambda s: 10, lambda s: group.get(s, ""), lambda s: s != "cc")
    assert ids[start:end] == ["a1", "r1", "a2", "r2"]  # stops before the cache_control message
    assert fit.head_end(["s1", "s2", "u", "a"], lambda s: "system" if s.startswith("s") else "") == 3


async def _replay(proxy: Proxy, api: str, turns: int) -> list[dict[str, Any]]:
    """The agent's requests, back to back (no time for digests), each checked: accepted by the
    upstream and counted by it within the window."""
    url, history = start(api, f"http://127.0.0.1:{proxy.port}")
    sent: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http:
        for i in range(turns):
            if i:
                history += openai_turn(i) if api == "openai" else anthropic_turn(i)
            body: dict[str, Any] = {"model": "smollm2", "max_tokens": 1, "messages": history}
            if api == "anthropic":
                body["system"] = [{"type": "text", "text": "You are a coding agent."}]
            async with http.post(url, json=body, headers=HEADERS) as r:
                answer = await r.json()
                assert r.status == 200, answer  # accepted: no broken pair or role order
            usage = answer["usage"]
            assert usage.get("prompt_tokens", usage.get("input_tokens", 0)) <= WINDOW
            sent.append(json.loads(json.dumps(body)))
    return sent


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_requests_fit_without_the_daemon(
    api: str, anthropic_upstream: ModelServer, tmp_path: Path
) -> None:
    # no daemon behind the socket: not one digest will come; the window must hold anyway
    settings = proxy_settings(anthropic_upstream.url, f"ipc://{tmp_path}/nobody.sock", window=WINDOW)
    async with Proxy(settings) as proxy:
        sent = await _replay(proxy, api, 11)
        bodies = [json.loads(b) for _, b in proxy.sent]
    notes = [b for b in bodies if "[compactd elided" in json.dumps(b)]
    assert notes, "the window was outgrown and nothing was elided"
    for b, s in zip(bodies, sent, strict=True):
        if api == "openai":
            check_openai_body(b)
            assert b["messages"][:2] == s["messages"][:2]  # the system prompt and the task stay first
        else:
            check_anthropic_body(b, s)
            assert b["messages"][0] == s["messages"][0]
    # sticky: after a cut, the next request repeats the previous one's messages and appends
    repeats = sum(
        nxt["messages"][: len(prev["messages"])] == prev["messages"]
        for prev, nxt in itertools.pairwise(notes)
    )
    assert repeats >= len(notes) // 2  # a cut moves only when the window needs it again (hysteresis)
    cuts = {json.dumps(m) for b in notes for m in b["messages"] if "[compactd elided" in json.dumps(m)}
    assert len(cuts) < len(notes)  # the same note, byte for byte, on several requests


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_requests_fit_when_turns_outrun_the_daemon(
    api: str, anthropic_upstream: ModelServer, daemon: DaemonProcess
) -> None:
    settings = proxy_settings(anthropic_upstream.url, daemon.endpoint, window=WINDOW)
    async with Proxy(settings) as proxy:
        await _replay(proxy, api, 14)
        status = proxy.status()
    conv = status["conversations"][0]
    assert conv["tokens_upstream"] <= WINDOW
    assert daemon.proc.poll() is None
