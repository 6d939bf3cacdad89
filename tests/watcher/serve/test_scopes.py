"""Scopes: identity from authentication (per-agent tokens), never from the claimed name; an agent
reaches its own rows across its sessions and nothing of another agent's (seed 003's P0 leak)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ipc.client import AgentLink, LinkError
from ipc.protocol import Hello
from ipc.sections import Section
from summarizer.digest import approx_tokens
from watcher.config.settings import AgentOverride, Config
from watcher.eval.harness import DaemonProcess, running_daemon
from watcher.serve.auth import AuthError, PeerInfo, authenticate

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-fedcba9876543210xyz"
BUDGET = 2000
SECRET = "ALICE-ONLY launch code 7-7-3"


def hello(agent: str, token: str = "") -> Hello:
    return Hello(agent, "default", 4000, None, token, "", None, False)


CFG = Config(agents={"alice": AgentOverride(token=ALICE), "bob": AgentOverride(token=BOB)})


def test_authenticate_by_token_never_by_name() -> None:
    assert authenticate(hello("alice", ALICE), PeerInfo(), CFG).method == "token"
    for h, why in (
        (hello("alice"), "requires its token"),
        (hello("alice", "x" * 28), "wrong token"),
        (hello("alice", BOB), "wrong token"),  # bob's valid token does not make him alice
        (hello("mallory", ALICE), "no token configured"),
    ):
        with pytest.raises(AuthError, match=why):
            authenticate(h, PeerInfo(), CFG)
    assert authenticate(hello("mallory"), PeerInfo(), CFG).method == "local"  # the ipc trust model
    owner = {"KEY-A": "alice"}.get
    with pytest.raises(AuthError, match="belongs to agent 'alice'"):
        authenticate(hello("bob", BOB), PeerInfo("tcp", "KEY-A"), CFG, owner)
    open_cfg = Config()
    assert (
        authenticate(hello("carol"), PeerInfo("tcp", "KEY-C"), open_cfg, {"KEY-C": "carol"}.get).method
        == "curve"
    )


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[DaemonProcess]:
    cfg = tmp_path / "compactd.toml"
    cfg.write_text(f'[agents.alice]\ntoken = "{ALICE}"\n\n[agents.bob]\ntoken = "{BOB}"\n')
    async with running_daemon(tmp_path, str(cfg), model=False) as proc:
        yield proc


def link(d: DaemonProcess, agent: str, token: str, session: str = "default") -> AgentLink:
    return AgentLink(d.endpoint, agent=agent, budget=BUDGET, reserve=0.2, token=token, session=session)


async def fill(lk: AgentLink, prefix: str, n: int = 30, secret: str = SECRET) -> list[str]:
    """Grow the context until it compacts (every output quotes the agent's secret); returns the
    archive refs of the applied proposals."""
    refs: list[str] = []
    for i in range(n):
        text = f"{prefix} output {i}: {secret}; " + "compiling module and running the linter again; " * 8
        await lk.append(Section(f"{prefix}{i}", "tool_result", text, tokens=approx_tokens(text)), wait=True)
        while not lk.proposals.empty():
            p = lk.proposals.get_nowait()
            if await lk.apply(p):
                refs += p.archive
    for _ in range(30):
        with contextlib.suppress(TimeoutError):
            p = await asyncio.wait_for(lk.proposals.get(), 0.1)
            if await lk.apply(p):
                refs += p.archive
        st = (await lk.status())["agents"][0]
        if not st["compacting"] and not st["pending_proposals"] and lk.proposals.empty():
            break
    return refs


async def refused(call: object, code: str) -> None:
    with pytest.raises(LinkError) as err:
        await call  # type: ignore[misc]
    assert err.value.code == code, err.value


async def test_hello_without_the_right_token_is_unauthorized(secured: DaemonProcess) -> None:
    for agent, token in (
        ("alice", ""),
        ("alice", "not-alices-token-at-all"),
        ("alice", BOB),
        ("mallory", ALICE),
    ):
        impostor = link(secured, agent, token)
        try:
            with pytest.raises(LinkError) as err:
                await impostor.connect()
            assert err.value.code == "unauthorized"
            assert ALICE not in str(err.value) and BOB not in str(err.value)  # secrets never echoed
        finally:
            await impostor.close(bye=False)
    async with link(secured, "alice", ALICE) as lk:
        assert lk.welcome["agent"] == "alice"
    async with link(secured, "mallory", "") as lk:  # no token configured: the local trust model
        assert lk.welcome["agent"] == "mallory"


async def test_no_agent_reaches_another_agents_rows(secured: DaemonProcess) -> None:
    async with link(secured, "alice", ALICE) as alice, link(secured, "bob", BOB) as bob:
        refs = await fill(alice, "al")
        assert refs, "alice compacted nothing"
        await alice.checkpoint("alice-cp")
        await fill(bob, "bo", 3, "BOB-ONLY note")
        # by archive ref, plain and claiming alice's identity
        for ref in refs:
            await refused(bob.recall(ref), "not_found")
            await refused(bob.request({"t": "RECALL", "refs": [ref], "agent": "alice"}), "unauthorized")
        # by section id and digest id
        archived = await alice.recall(refs[0])
        await refused(bob.recall_sections(archived[refs[0]][0].id), "not_found")
        digests = [s.id for s in alice.context if s.kind == "digest"]
        await refused(bob.recall_sections(*digests), "not_found")
        # by search
        own, _ = await alice.search("launch code")
        assert own, "alice cannot find her own archived secret"
        assert await bob.search("launch code") == ([], None)
        await refused(bob.request({"t": "RECALL", "query": "launch", "agent": "alice"}), "unauthorized")
        # checkpoints: show, restore, drop, plain and claiming
        await refused(bob.show_checkpoint("alice-cp", sections=True), "not_found")
        await refused(
            bob.request({"t": "RESTORE", "name": "alice-cp", "epoch": 0, "force": True}), "not_found"
        )
        await refused(
            bob.request({"t": "RESTORE", "name": "alice-cp", "epoch": 0, "agent": "alice"}), "unauthorized"
        )
        await refused(bob.drop_checkpoint("alice-cp"), "not_found")
        assert await bob.checkpoints() == []
        # status
        await refused(bob.request({"t": "STATUS", "agent": "alice"}), "unauthorized")
        assert [a["agent"] for a in (await bob.status())["agents"]] == ["bob"]
        # and alice still has everything
        assert (await alice.show_checkpoint("alice-cp"))[0]["name"] == "alice-cp"
        assert set(await alice.recall(*refs)) == set(refs)


async def test_an_agent_recalls_across_its_sessions_not_anothers(secured: DaemonProcess) -> None:
    async with link(secured, "alice", ALICE, session="monday") as alice:
        refs = await fill(alice, "mon")
        await alice.checkpoint("monday-end")
    async with link(secured, "alice", ALICE, session="tuesday") as alice:
        assert set(await alice.recall(*refs)) == set(refs)
        assert [c["session"] for c in await alice.checkpoints()] == ["monday"]
        hits, _ = await alice.search("launch code")
        assert {h["session"] for h in hits} == {"monday"}
    async with link(secured, "bob", BOB, session="monday") as bob:  # same session name, other agent
        await refused(bob.recall(refs[0]), "not_found")
        assert await bob.search("launch code") == ([], None)
