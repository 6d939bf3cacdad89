"""Reader attachments (HELLO reader: true): the agent's own attachment stays, readers only read."""

from __future__ import annotations

import pytest

from ipc import AgentLink, LinkError, Section
from watcher.eval.harness import DaemonProcess


async def test_a_reader_never_displaces_the_agent_and_only_reads(
    token_daemon: DaemonProcess, tokens: dict[str, str]
) -> None:
    ep = token_daemon.endpoint
    async with AgentLink(ep, "alpha", 4000, token=tokens["alpha"], policy="manual") as agent:
        await agent.append(Section("m1", "user", "the task"), wait=True)
        async with AgentLink(ep, "alpha", 1000, token=tokens["alpha"], reader=True) as reader:
            assert reader.welcome["reader"] is True and reader.welcome["agent"] == "alpha"
            beat = await reader.request({"t": "HEARTBEAT"})
            assert beat["attached"] is True
            with pytest.raises(LinkError) as refused:
                await reader.request({"t": "DELTA", "base": 0, "ops": []})
            assert refused.value.code == "invalid"
            small = await reader.compress("short text")
            assert small["compressed"] is False and small["text"] == "short text"
            with pytest.raises(LinkError) as gone:
                await reader.recall("a999999")
            assert gone.value.code == "not_found"
        # the agent is still the attached one: its context is there, it never re-attached
        await agent.append(Section("m2", "assistant", "working on it"), wait=True)
        me = (await agent.status())["agents"][0]
        assert me["agent"] == "alpha" and me["sections"] == 2
        assert agent.reattaches == 0
    with pytest.raises(LinkError) as wrong:
        async with AgentLink(ep, "alpha", 1000, token=tokens["beta"], reader=True):
            pass
    assert wrong.value.code == "unauthorized"
