"""The serving loop stays free of the compaction's heavy steps: plans are computed in a thread (and
made again when the mirror moved meanwhile), Python's full collections are paced. A real Server on
a real ipc socket, a real store file and a real AgentLink."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from ipc.client import AgentLink
from ipc.context import Context
from ipc.protocol import Op
from ipc.sections import Section, is_packed
from summarizer.digest import Summarizer
from tests.fixtures.daemon import wait_until
from tests.fixtures.server import serving
from watcher.config.settings import AgentOverride, Config
from watcher.planning.planner import Watermarks
from watcher.planning.policies import PlanInputs, Planned, Policy, policy_for
from watcher.serve.housekeeping import SWITCH_INTERVAL_S, gc_pacer
from watcher.serve.jobs import unchanged
from watcher.serve.limits import section_bytes
from watcher.serve.server import Server
from watcher.serve.session import Session
from watcher.store.store import DB_NAME, Store


class Gated:
    """The optimistic policy, but its first plan waits (in its thread) until the test opens the gate."""

    def __init__(self) -> None:
        self.inner = policy_for("optimistic")
        self.gate = threading.Event()
        self.started = threading.Event()  # the first plan began
        self.calls: list[tuple[int, bool]] = []  # (sections planned on, on the loop's thread?)
        self.name, self.plans_ahead, self.needs_features = "optimistic", True, True

    def trigger(self, marks: Watermarks, growth: int) -> int:
        return self.inner.trigger(marks, growth)

    def plan(self, sections: Sequence[Section], marks: Watermarks, inputs: PlanInputs) -> Planned | None:
        self.calls.append((len(sections), threading.current_thread() is threading.main_thread()))
        self.started.set()
        if len(self.calls) == 1:
            self.gate.wait(10)
        return self.inner.plan(sections, marks, inputs)


def output(i: int) -> Section:
    return Section(f"s{i}", "tool_result", "".join(f"row {i}.{j}: value={i * 31 + j}\n" for j in range(12)))


async def test_the_loop_serves_while_a_plan_is_made_and_a_moved_mirror_is_planned_again(
    tmp_path: Path,
) -> None:
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    endpoint = f"ipc://{tmp_path}/s.sock"
    sock.bind(endpoint)
    store = Store.open(tmp_path / DB_NAME)
    gated = Gated()
    server = Server(sock, Config(), Summarizer(None), store=store, policies=lambda name: gated)
    stop = asyncio.Event()
    switch = sys.getswitchinterval()
    task = asyncio.create_task(server.run(stop))
    try:
        async with AgentLink(endpoint, agent="gated", budget=3000, reserve=0.2, zmq_context=ctx) as link:
            assert sys.getswitchinterval() <= SWITCH_INTERVAL_S
            i = 0
            while not gated.calls:  # until the compaction job has started planning
                i += 1
                assert i < 200, "no plan was started"
                await link.append(output(i), wait=True)
                await asyncio.to_thread(
                    gated.started.wait, 0.05
                )  # the first plan's start, or the next section
            t0 = time.monotonic()
            await link.append(output(i + 1), wait=True)  # while the plan is held in its thread
            assert time.monotonic() - t0 < 2.0
            assert len(gated.calls) == 1
            version = link.context.version
            gated.gate.set()
            p = await asyncio.wait_for(link.proposals.get(), 15)
            # planned again, on the mirror with the new section, in a thread
            assert len(gated.calls) >= 2 and gated.calls[1][0] == gated.calls[0][0] + 1
            assert not any(on_loop for _, on_loop in gated.calls)
            assert p.base == version
            assert await link.apply(p)
            assert p.archive and store.archive.entry("gated", p.archive[0]) is not None  # archived first
    finally:
        gated.gate.set()
        stop.set()
        await task
        await server.drain()
        sock.close(0)
        ctx.term()
        store.close()
    assert sys.getswitchinterval() == switch  # restored when the server stops


def test_unchanged_means_the_same_section_objects_in_order() -> None:
    a, b = Section("a", "user", "x", tokens=1), Section("b", "user", "y", tokens=1)
    ctx = Context([a, b], 2)
    snap = list(ctx)
    assert unchanged(snap, ctx)
    assert not unchanged(snap[:1], ctx)
    ctx.reset([a, Section("b", "user", "y", tokens=1)], 2)  # equal, but not the same: a new mirror
    assert not unchanged(snap, ctx)


class Node:
    other: Node | None = None


async def test_gc_pacer_keeps_survivors_out_of_collections_until_the_full_one() -> None:
    node = Node()
    node.other = node  # a reference cycle: only the collector frees it
    gone = weakref.ref(node)
    pacer = asyncio.create_task(gc_pacer(freeze_every_s=0.05, full_every_s=0.6))
    try:
        await wait_until(lambda: gc.get_freeze_count() > 0, 5, "the pacer froze the survivors")
        assert gc.get_freeze_count() > 0
        del node
        gc.collect()
        assert gone() is not None  # frozen: collections do not visit it...
        await wait_until(lambda: gone() is None, 5, "the full collection frees the cycle")
        assert gone() is None  # ...until the periodic full collection
    finally:
        pacer.cancel()
        await asyncio.gather(pacer, return_exceptions=True)
    assert gc.get_freeze_count() == 0  # everything handed back when it stops


async def test_a_session_gets_its_policy_once_at_hello_and_only_a_reload_replaces_it(tmp_path: Path) -> None:
    chosen: list[str] = []

    def policies(name: str) -> Policy:
        chosen.append(name)
        return policy_for(name)

    def make(sock: zmq.asyncio.Socket) -> Server:
        return Server(sock, Config(), Summarizer(None), policies=policies)

    async with serving(tmp_path, make) as served:
        server = served.server
        async with AgentLink(
            served.endpoint, agent="p", budget=3000, planner="masking", zmq_context=served.ctx
        ) as link:
            assert link.welcome["planner"] == "masking"
            for i in range(1, 60):  # past the high watermark: the masking policy proposes
                await link.append(output(i), wait=True)
                if not link.proposals.empty():
                    break
            p = await asyncio.wait_for(link.proposals.get(), 15)
            assert any(s.meta.get("masked") == "1" for s in p.digest), "masked by the session's policy"
            assert chosen == ["masking"], "chosen once, at HELLO, not per job"
            server.apply_config(Config(agents={"p": AgentOverride(planner="recency")}))
            assert chosen == ["masking", "recency"]
            assert (await link.status())["agents"][0]["planner"] == "recency"
            assert server.cfg.agents["p"].planner == "recency"


async def test_the_mirror_holds_long_texts_packed_and_counts_and_reads_them_as_sent(tmp_path: Path) -> None:
    log = "".join(f"FAILED tests/test_mod.py::test_{i} - AssertionError: {i} != {i + 1}\n" for i in range(99))
    wide = log.replace("!=", "≠")  # not ASCII: 3 bytes a char in UTF-8

    def make(sock: zmq.asyncio.Socket) -> Server:
        return Server(sock, Config(), Summarizer(None))

    async with (
        serving(tmp_path, make) as served,
        AgentLink(served.endpoint, agent="p", budget=200_000, zmq_context=served.ctx) as link,
    ):
        packer = served.server.packer
        await link.snapshot([Section("a", "tool_result", log), Section("q", "user", "short question")])
        await link.append(Section("b", "tool_result", wide), wait=True)  # a DELTA
        await packer.pack()
        state = served.server.agents["p"]
        held = {s.id: s for s in state.ctx}
        assert [is_packed(held[k]) for k in ("a", "q", "b")] == [True, False, True]
        assert [(s.id, s.kind, s.text) for s in state.ctx] == [(s.id, s.kind, s.text) for s in link.context]
        assert state.nbytes == sum(section_bytes(s) for s in link.context)
        assert state.nbytes == sum(len(s.text.encode()) + len(s.id) for s in link.context)
        assert all(s.tokens for s in state.ctx), "counted by the daemon, before it packed them"
        assert packer.stats()["packed_sections"] == 2 and packer.stats()["packed_saved_bytes"] > 5000

        # a swap waits while a job plans; a copy whose original left the mirror is dropped (the
        # server's own packer runs too, every PACK_EVERY_S: each step holds whoever packs)
        state.planning = True  # a job plans on the mirror's objects: swaps wait for it
        await link.replace(Section("a", "tool_result", wide), wait=True)
        replaced = state.ctx.get("a")
        packer.note(state, [replaced])  # queued twice: the second copy finds the first swapped in
        await packer.pack()
        assert state.ctx.get("a") is replaced and packer.stats()["pack_waiting"] == 2
        state.planning = False
        await packer.pack()
        assert is_packed(state.ctx.get("a")) and state.ctx.get("a").text == wide
        assert packer.stats() == {
            "packed_sections": 3,
            "packed_saved_bytes": packer.saved,
            "pack_waiting": 0,
            "pack_skipped": 0,
        }


async def test_pack_texts_off_keeps_new_texts_as_they_came(tmp_path: Path) -> None:
    log = "".join(f"ok {i}: value={i * 7}\n" for i in range(200))
    cfg = dataclasses.replace(Config(), daemon=dataclasses.replace(Config().daemon, pack_texts=False))

    def make(sock: zmq.asyncio.Socket) -> Server:
        return Server(sock, cfg, Summarizer(None))

    async with (
        serving(tmp_path, make) as served,
        AgentLink(served.endpoint, agent="p", budget=200_000, zmq_context=served.ctx) as link,
    ):
        await link.append(Section("a", "tool_result", log), wait=True)
        await served.server.packer.pack()
        assert not is_packed(served.server.agents["p"].ctx.get("a"))
        assert served.server.packer.stats()["packed_sections"] == 0


async def test_the_packer_skips_folded_sections_and_bounds_its_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    from watcher.serve import packer as packer_module

    text = "".join(f"row {i}: value={i * 3}\n" for i in range(200))
    state = Session("a", "default", b"peer", Watermarks(10_000, 0.2, 0.5))
    kept, folded, extra = (Section(k, "tool_result", text) for k in ("kept", "folded", "extra"))
    state.ctx.reset([kept, folded], 1)
    monkeypatch.setattr(packer_module, "MAX_WAITING", 2)
    packed_ids: list[str] = []
    pack_all = packer_module._pack_all
    monkeypatch.setattr(
        packer_module, "_pack_all", lambda secs: packed_ids.extend(s.id for s in secs) or pack_all(secs)
    )
    p = packer_module.Packer()
    p.note(state, [kept, folded, extra])  # the third is over the bound: left as it came
    assert p.stats()["pack_waiting"] == 2 and p.stats()["pack_skipped"] == 1
    state.ctx.apply_ops([Op("remove", ids=("folded",))], 2)  # folded before the packer ran
    assert await p.pack() == 1
    assert packed_ids == ["kept"], "a section the mirror no longer holds is not packed"
    assert is_packed(state.ctx.get("kept")) and p.stats()["pack_waiting"] == 0
    p.close()


async def test_a_send_from_a_task_to_a_gone_peer_is_counted_not_left_in_a_future(tmp_path: Path) -> None:
    """Outside the serving loop's own turn (a compaction task) replies go through the asyncio
    socket, whose non-blocking send reports an error in the future it returns: the server reads it
    (send_failures, and a send_failed line), and no future is left with an error nobody retrieved
    (asyncio would log each with a formatted traceback, on the loop)."""
    unretrieved: list[str] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(str(context.get("message"))))

    def make(sock: zmq.asyncio.Socket) -> Server:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # as the daemon's transport sets it
        return Server(sock, Config(), Summarizer(None))

    async with serving(tmp_path, make) as served:
        server = served.server
        for _ in range(3):
            server.send(b"\x00gone-peer", {"t": "HEARTBEAT"})  # from the test's task: not the loop's turn
        assert server.send_failures == 3
        server.send(b"\x00gone-peer", {"t": "HEARTBEAT"}, quiet=True)
        assert server.send_failures == 4
        async with AgentLink(served.endpoint, agent="s", budget=3000, zmq_context=served.ctx) as link:
            assert (await link.status())["daemon"]["send_failures"] == 4
    gc.collect()
    await asyncio.sleep(0)
    loop.set_exception_handler(None)
    assert unretrieved == []
