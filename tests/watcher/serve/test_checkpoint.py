"""CHECKPOINT / RESTORE over a real daemon: save, list, show, drop, restore; the guardrails (the
side-effect epoch, expected vs actual tokens); checkpoints surviving a SIGKILL restart."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ipc.client import AgentLink, LinkError
from ipc.sections import Section
from summarizer.digest import approx_tokens
from tests.fixtures.daemon import wait_until
from watcher.eval.harness import DaemonProcess

BUDGET = 2000
FILLER = "pytest collected 12 items; tests/test_io.py::test_roundtrip PASSED and more output; "


@pytest.fixture
async def nomodel(tmp_path: Path) -> AsyncIterator[DaemonProcess]:
    (tmp_path / "c.toml").write_text("[daemon]\nheartbeat_s = 0.5\n")
    proc = DaemonProcess(tmp_path, str(tmp_path / "c.toml"), model=False)
    try:
        await proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def sec(sid: str, text: str, kind: str = "tool_result", tokens: int | None = None) -> Section:
    return Section(sid, kind, text, tokens=approx_tokens(text) if tokens is None else tokens)


async def grow(link: AgentLink, prefix: str, n: int) -> int:
    """Append n sections, applying every proposal that arrives; returns how many were applied."""
    applied = 0
    for i in range(n):
        await link.append(sec(f"{prefix}{i}", f"{prefix} {i}: " + FILLER * 6), wait=True)
        while not link.proposals.empty():
            applied += await link.apply(link.proposals.get_nowait())
    for _ in range(50):  # until the daemon has nothing running or pending for us
        while not link.proposals.empty():
            applied += await link.apply(link.proposals.get_nowait())
        st = await mirror(link)
        if not st["compacting"] and not st["pending_proposals"]:
            return applied
        with contextlib.suppress(TimeoutError):
            applied += await link.apply(await asyncio.wait_for(link.proposals.get(), 0.1))
    return applied


async def mirror(link: AgentLink) -> dict[str, object]:
    st: dict[str, object] = (await link.status())["agents"][0]
    return st


async def test_save_list_show_drop(nomodel: DaemonProcess) -> None:
    async with AgentLink(nomodel.endpoint, agent="cp", budget=BUDGET, reserve=0.2) as link:
        await link.append(sec("sys", "You are a careful agent.", "system"), sec("u", "Fix it.", "user"))
        meta = await link.checkpoint("start", note="before anything")
        assert (meta["name"], meta["version"], meta["sections"], meta["epoch"]) == ("start", 1, 2, 0)
        assert meta["tokens"] == link.context.tokens and meta["note"] == "before anything"
        await link.append(sec("t1", "ran the tests"), wait=True)
        auto = await link.checkpoint()  # the daemon names it
        assert auto["name"].startswith("v2-")
        assert [c["name"] for c in await link.checkpoints()] == ["start", auto["name"]]
        shown, sections = await link.show_checkpoint("start", sections=True)
        assert shown == meta and sections == [
            sec("sys", "You are a careful agent.", "system"),
            sec("u", "Fix it.", "user"),
        ]
        with pytest.raises(LinkError) as err:
            await link.checkpoint("start")
        assert err.value.code == "invalid" and "exists" in str(err.value)
        assert (await link.checkpoint("start", overwrite=True))["version"] == 2
        await link.drop_checkpoint("start")
        with pytest.raises(LinkError) as err:
            await link.drop_checkpoint("start")
        assert err.value.code == "not_found"
        with pytest.raises(LinkError) as err:
            await link.request({"t": "CHECKPOINT", "op": "save", "version": 999})
        assert err.value.code == "version_mismatch"
        with pytest.raises(LinkError) as err:
            await link.request({"t": "CHECKPOINT", "op": "explode"})
        assert err.value.code == "invalid"


async def test_restore_brings_back_the_context_and_reports_tokens(nomodel: DaemonProcess) -> None:
    async with AgentLink(nomodel.endpoint, agent="rs", budget=BUDGET, reserve=0.2) as link:
        await grow(link, "a", 6)
        saved = list(link.context)
        await link.checkpoint("good")
        assert await grow(link, "b", 30) > 0  # compacted meanwhile: the context moved on
        assert list(link.context) != saved
        before = link.context.version
        report = await link.restore("good")
        assert list(link.context) == saved
        assert report["version"] == link.context.version > before
        assert report["expected_tokens"] == report["actual_tokens"] == report["context_tokens"]
        assert not report["token_mismatch"] and not report["forced"]
        st = await mirror(link)
        assert (st["version"], st["tokens"], st["sections"]) == (
            link.context.version,
            link.context.tokens,
            len(saved),
        )
        await grow(link, "c", 3)  # the agent carries on from the restored context
        assert (await mirror(link))["version"] == link.context.version


async def test_epoch_guardrail_refuses_unless_forced(nomodel: DaemonProcess) -> None:
    async with AgentLink(nomodel.endpoint, agent="ep", budget=BUDGET, reserve=0.2) as link:
        await link.append(sec("u", "Deploy the fix.", "user"), wait=True)
        await link.checkpoint("pre-deploy")
        await link.append(sec("t", "$ ./deploy.sh -> deployed v2"), wait=True)
        link.side_effect()  # the deploy happened: rewinding the context cannot undo it
        now = list(link.context)
        with pytest.raises(LinkError) as err:
            await link.restore("pre-deploy")
        assert err.value.code == "epoch_changed" and "saved at 0, now 1" in str(err.value)
        assert list(link.context) == now and (await mirror(link))["version"] == link.context.version
        report = await link.restore("pre-deploy", force=True)
        assert report["forced"] and (report["epoch_saved"], report["epoch_now"]) == (0, 1)
        assert [s.id for s in link.context] == ["u"]


async def test_restore_reports_a_token_mismatch(nomodel: DaemonProcess) -> None:
    async with AgentLink(nomodel.endpoint, agent="tm", budget=BUDGET, reserve=0.2) as link:
        text = "a long tool output " * 40
        await link.append(sec("t", text, tokens=5), wait=True)  # the agent's own (wrong) count
        await link.checkpoint("x")
        report = await link.restore("x")
        assert report["expected_tokens"] == 5
        assert report["actual_tokens"] == approx_tokens(text) and report["token_mismatch"]


@pytest.mark.slow
async def test_checkpoints_survive_a_sigkill_and_the_agent_resyncs_alone(
    nomodel: DaemonProcess, tmp_path: Path
) -> None:
    async with AgentLink(nomodel.endpoint, agent="dur", budget=BUDGET, reserve=0.2, timeout_s=3) as link:
        await grow(link, "a", 12)
        saved = list(link.context)
        await link.checkpoint("keep")
        nomodel.kill()
        again = DaemonProcess(tmp_path, str(tmp_path / "c.toml"), model=False, log_name="daemon2.log")
        try:
            await again.wait_ready()
            # the heartbeat finds the new daemon does not know us
            await wait_until(lambda: link.reattaches, 10, "the link reattaches")
            assert link.reattaches == 1
            st = await mirror(link)
            assert (st["version"], st["tokens"]) == (link.context.version, link.context.tokens)
            _, back = await link.show_checkpoint("keep", sections=True)
            assert back == saved
            await grow(link, "b", 20)
            await link.restore("keep")
            assert list(link.context) == saved
        finally:
            again.stop()
