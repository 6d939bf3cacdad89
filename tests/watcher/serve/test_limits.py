"""Caps on agents, sections and bytes: a real daemon subprocess refuses what would cross one with
ERROR "limit", applies nothing of it, and keeps serving everyone else."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio

from ipc.context import Context
from ipc.protocol import Op, decode, encode
from ipc.sections import Section
from watcher.eval.harness import DaemonProcess
from watcher.serve.limits import delta_effect, section_bytes

LIMITS = """
[daemon]
max_agents = 3
max_sections_per_agent = 20
max_bytes_per_agent = 6000
max_total_bytes = 10000
"""


class Raw:
    """One agent speaking the protocol by hand over a real DEALER, one request at a time."""

    def __init__(self, ctx: zmq.asyncio.Context, endpoint: str, agent: str) -> None:
        self.agent = agent
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.ids = itertools.count(1)
        self.version = 0

    async def ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        msg["id"] = next(self.ids)
        await self.sock.send(encode(msg))
        while True:
            assert await self.sock.poll(5000), f"no answer to {msg['t']}"
            reply = decode(await self.sock.recv())
            if reply.get("re") == msg["id"]:
                return reply

    async def hello(self) -> dict[str, Any]:
        return await self.ask({"t": "HELLO", "agent": self.agent, "budget": 100_000, "policy": "off"})

    async def snapshot(self, sections: list[Section], version: int) -> dict[str, Any]:
        return await self.ask(
            {"t": "SNAPSHOT", "version": version, "sections": [s.to_wire() for s in sections]}
        )

    async def delta(self, base: int, *ops: dict[str, Any]) -> dict[str, Any]:
        return await self.ask({"t": "DELTA", "base": base, "version": base + 1, "ops": list(ops)})

    async def mirror(self) -> dict[str, Any]:
        agents: list[dict[str, Any]] = (await self.ask({"t": "STATUS"}))["agents"]
        return agents[0]


def sec(sid: str, nbytes: int, ch: str = "x") -> Section:
    return Section(sid, "user", ch * nbytes, tokens=max(1, nbytes // 4))


def append(*secs: Section) -> dict[str, Any]:
    return {"op": "append", "sections": [s.to_wire() for s in secs]}


@pytest.fixture
async def limited(tmp_path: Path) -> AsyncIterator[tuple[DaemonProcess, zmq.asyncio.Context]]:
    cfg = tmp_path / "limits.toml"
    cfg.write_text(LIMITS)
    proc = DaemonProcess(tmp_path, str(cfg), model=False)
    ctx = zmq.asyncio.Context()
    try:
        await proc.wait_ready(30)
        yield proc, ctx
    finally:
        ctx.destroy(0)
        proc.stop()


def assert_limit(reply: dict[str, Any], key: str) -> None:
    assert reply["t"] == "ERROR" and reply["code"] == "limit", reply
    assert key in reply["message"] and "nothing was applied" in reply["message"]


# --- the accounting itself --------------------------------------------------------------------------


def test_bytes_are_utf8_and_include_id_and_meta() -> None:
    assert section_bytes(Section("ab", "user", "é" * 10)) == 2 + 20
    assert section_bytes(Section("a", "user", "xyz", meta={"k": "vv"})) == 1 + 3 + 3


def test_delta_effect_counts_only_the_change() -> None:
    ctx = Context([sec("a", 100), sec("b", 50)], version=1)
    dn, db = delta_effect(
        ctx,
        [
            Op("append", (sec("c", 10),)),
            Op("replace", (sec("a", 40),)),
            Op("remove", ids=("b",)),
        ],
    )
    assert (dn, db) == (0, 10 + 1 + (40 - 100) - (50 + 1))


# --- a real daemon ---------------------------------------------------------------------------------


async def test_section_cap_refuses_and_keeps_the_mirror(limited: tuple[DaemonProcess, Any]) -> None:
    proc, ctx = limited
    a = Raw(ctx, proc.endpoint, "sections")
    assert (await a.hello())["t"] == "WELCOME"
    assert (await a.snapshot([sec(f"s{i}", 10) for i in range(18)], 1))["t"] == "SYNCED"
    assert (await a.delta(1, append(sec("s18", 10), sec("s19", 10))))["t"] == "SYNCED"  # 20: at the cap
    assert_limit(await a.delta(2, append(sec("s20", 10))), "daemon.max_sections_per_agent")
    m = await a.mirror()
    assert (m["version"], m["sections"]) == (2, 20), "nothing of the refused delta was applied"
    # the same base still applies: remove one, then the append fits
    assert (await a.delta(2, {"op": "remove", "ids": ["s0"]}))["t"] == "SYNCED"
    assert (await a.delta(3, append(sec("s20", 10))))["t"] == "SYNCED"
    assert_limit(await a.snapshot([sec(f"t{i}", 1) for i in range(21)], 9), "daemon.max_sections_per_agent")
    m = await a.mirror()
    assert (m["version"], m["sections"]) == (4, 20)


async def test_byte_caps_per_agent_and_in_total(limited: tuple[DaemonProcess, Any]) -> None:
    proc, ctx = limited
    a, b, c = (Raw(ctx, proc.endpoint, n) for n in ("bytes-a", "bytes-b", "bytes-c"))
    for agent in (a, b, c):
        assert (await agent.hello())["t"] == "WELCOME"
    # per agent: 6000 bytes; multi-byte text counts as UTF-8
    assert_limit(await a.snapshot([sec("big", 3100, "é")], 1), "daemon.max_bytes_per_agent")
    assert (await a.snapshot([sec("s1", 2900, "é")], 1))["t"] == "SYNCED"  # 5802 bytes
    assert_limit(await a.delta(1, append(sec("s2", 200))), "daemon.max_bytes_per_agent")
    grow = {"op": "replace", "sections": [sec("s1", 3000, "é").to_wire()]}
    assert_limit(await a.delta(1, grow), "daemon.max_bytes_per_agent")
    m = await a.mirror()
    assert m["version"] == 1 and m["sections"] == 1
    # in total: 10000 bytes across agents
    assert (await b.snapshot([sec("s1", 3500)], 1))["t"] == "SYNCED"  # 5802 + 3502 = 9304
    assert_limit(await c.snapshot([sec("s1", 1000)], 1), "daemon.max_total_bytes")
    assert_limit(await b.delta(1, append(sec("s2", 1000))), "daemon.max_total_bytes")
    # the others are unaffected, and room comes back when an agent shrinks
    shrink = {"op": "replace", "sections": [sec("s1", 100).to_wire()]}
    assert (await a.delta(1, shrink))["t"] == "SYNCED"
    assert (await c.snapshot([sec("s1", 1000)], 1))["t"] == "SYNCED"
    assert (await b.delta(1, append(sec("s2", 1000))))["t"] == "SYNCED"
    # STATUS tells the operator what the mirrors hold: 102 (a) + 3502 + 1002 (b) + 1002 (c)
    assert (await a.ask({"t": "STATUS"}))["daemon"]["mirror_bytes"] == 5608


async def test_multipart_snapshot_is_capped_while_staged(limited: tuple[DaemonProcess, Any]) -> None:
    proc, ctx = limited
    a = Raw(ctx, proc.endpoint, "staged")
    await a.hello()
    assert (await a.snapshot([sec("s1", 100)], 1))["t"] == "SYNCED"
    part0 = {"t": "SNAPSHOT", "version": 5, "part": 0, "more": True, "sections": [sec("p1", 4000).to_wire()]}
    await a.sock.send(encode({**part0, "v": 1}))  # staged: no reply without an id
    part1 = {"t": "SNAPSHOT", "version": 5, "part": 1, "more": False, "sections": [sec("p2", 4000).to_wire()]}
    assert_limit(await a.ask(part1), "daemon.max_bytes_per_agent")
    m = await a.mirror()
    assert (m["version"], m["sections"]) == (1, 1), "the old mirror is intact"


async def test_agent_cap(limited: tuple[DaemonProcess, Any]) -> None:
    proc, ctx = limited
    agents = [Raw(ctx, proc.endpoint, f"agent-{i}") for i in range(4)]
    for agent in agents[:3]:
        assert (await agent.hello())["t"] == "WELCOME"
    refused = await agents[3].hello()
    assert (
        refused["t"] == "ERROR" and refused["code"] == "limit" and "daemon.max_agents" in refused["message"]
    )
    assert (await agents[0].hello())["t"] == "WELCOME", "the same id reattaching is not a new agent"
    assert (await agents[1].ask({"t": "BYE"}))["t"] == "BYE"
    assert (await agents[3].hello())["t"] == "WELCOME"
    assert proc.proc.poll() is None
