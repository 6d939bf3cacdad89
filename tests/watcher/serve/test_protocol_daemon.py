"""Protocol v1 against a real daemon subprocess (no model: deterministic digests), over real
ZeroMQ: negotiation, errors that name the request, gaps and RESYNC, multi-part snapshots, frame
limits, stale proposals, heartbeats and expiry, re-attaching, BYE, and malformed frames from
one peer while another agent keeps working."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipc import AgentLink, LinkError, Section, SyncAgentLink, Transcript
from ipc.protocol import T, encode
from tests.fixtures.daemon import wait_until
from tests.fixtures.raw import Raw
from watcher.eval.harness import DaemonProcess

MAX_FRAME = 262_144
CONFIG = f"""
[daemon]
max_frame_bytes = {MAX_FRAME}
heartbeat_s = 0.2
agent_timeout_s = 1.2
"""


def start(workdir: Path) -> DaemonProcess:
    cfg = workdir / "compactd.toml"
    cfg.write_text(CONFIG)
    proc = DaemonProcess(workdir, str(cfg), model=False)
    asyncio.run(proc.wait_ready())
    return proc


@pytest.fixture(scope="module")
def proto_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    proc = start(tmp_path_factory.mktemp("protod"))
    try:
        yield proc
        assert proc.proc.poll() is None, f"the daemon died: {proc.log_tail()}"
        log = proc.log_path.read_text(errors="replace")
        assert "internal_error" not in log, log[log.find("internal_error") - 2000 :][:4000]
    finally:
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture
def raw(proto_daemon: DaemonProcess) -> Iterator[Raw]:
    r = Raw(proto_daemon.endpoint)
    yield r
    r.close()


def sec(i: int, tokens: int = 100, text: str = "") -> Section:
    return Section(f"s{i}", "tool_result", text or f"output {i} " * 30, tokens=tokens)


# --- negotiation and errors ---------------------------------------------------------------------------


def test_hello_negotiates_the_protocol_version(raw: Raw) -> None:
    hello = {"t": "HELLO", "id": 1, "versions": [1, 7], "agent": "neg", "budget": 4000, "tokenizer": "o200k"}
    w = raw.ask(hello)
    assert w["t"] == "WELCOME" and w["re"] == 1 and w["version"] == 1 and w["versions"] == [1]
    assert (w["heartbeat_s"], w["agent_timeout_s"], w["max_frame"]) == (0.2, 1.2, MAX_FRAME)
    assert w["tokenizer"] == "approx:chars/3" and w["context_version"] == 0
    state = raw.ask({"t": "STATUS", "id": 2})
    assert state["agents"][0]["tokenizer"] == "o200k"
    e = raw.ask({"t": "HELLO", "id": 3, "versions": [7, 8], "agent": "neg", "budget": 4000})
    assert (e["t"], e["code"], e["re"]) == ("ERROR", "bad_version", 3) and "[1]" in e["message"]
    e = raw.ask(msgpack.packb({"v": 2, "t": "HELLO", "id": 4, "agent": "neg", "budget": 4000}))
    assert (e["code"], e["re"]) == ("bad_version", 4)
    raw.ask({"t": "BYE", "id": 5})


def test_errors_name_the_offending_request(raw: Raw) -> None:
    e = raw.ask({"t": "FROB", "id": 11, "x": 1})
    assert (e["t"], e["code"], e["re"]) == ("ERROR", "unknown_type", 11) and "FROB" in e["message"]
    e = raw.ask({"t": "DELTA", "id": 12, "base": 0, "ops": []})
    assert (e["code"], e["re"]) == ("not_attached", 12) and "HELLO" in e["message"]
    raw.ask({"t": "HELLO", "id": 13, "agent": "errs", "budget": 4000, "unknown_field": [1, 2]})
    e = raw.ask({"t": "DELTA", "id": 14, "base": "0", "ops": []})
    assert (e["code"], e["re"]) == ("invalid", 14) and "'base'" in e["message"]
    e = raw.ask({"t": "NACK", "id": 15, "proposal": "p1", "reason": "bored"})
    assert (e["code"], e["re"]) == ("invalid", 15) and "stale" in e["message"]
    e = raw.ask({"t": "ACK", "id": 16, "proposal": "p404", "version": 1})
    assert (e["code"], e["re"]) == ("unknown_proposal", 16)
    e = raw.ask({"t": "STATUS", "id": -4})
    assert e["code"] == "invalid" and "re" not in e
    hb = raw.ask({"t": "HEARTBEAT", "id": 17})
    assert hb == {"t": "HEARTBEAT", "re": 17, "attached": True, "v": 1}
    raw.ask({"t": "BYE", "id": 18})
    assert raw.ask({"t": "HEARTBEAT"})["attached"] is False


# --- sync ------------------------------------------------------------------------------------------------


async def test_gap_is_resynced_and_the_waiting_request_answered(proto_daemon: DaemonProcess) -> None:
    async with AgentLink(proto_daemon.endpoint, agent="gap", budget=100_000) as link:
        await link.append(sec(1), sec(2), wait=True)
        # a delta that does not follow the mirror: the daemon asks for a SNAPSHOT (RESYNC, re=id),
        # the link sends it with the same id, and SYNCED answers the original request
        reply = await link.request({"t": T.DELTA, "base": 40, "version": 41, "ops": []})
        assert reply["t"] == "SYNCED" and reply["version"] == link.context.version == 1
        assert link.resyncs == 1
        await link.append(sec(3))
        await link.remove("s1", wait=True)
        mirror = (await link.status())["agents"][0]
        assert (mirror["version"], mirror["tokens"], mirror["sections"]) == (
            link.context.version,
            link.context.tokens,
            len(link.context),
        )


def test_deltas_while_unsynced_repeat_the_resync(raw: Raw) -> None:
    raw.ask({"t": "HELLO", "id": 1, "agent": "unsynced", "budget": 4000})
    r = raw.ask({"t": "DELTA", "id": 2, "base": 5, "version": 6, "ops": []})
    assert (r["t"], r["re"], r["version"]) == ("RESYNC", 2, 0) and "5->6" in r["reason"]
    r = raw.ask({"t": "DELTA", "id": 3, "base": 0, "version": 1, "ops": []})
    assert (r["t"], r["re"]) == ("RESYNC", 3)  # nothing applies until the SNAPSHOT
    wire = sec(1).to_wire()
    r = raw.ask({"t": "SNAPSHOT", "id": 4, "version": 9, "sections": [wire]})
    assert (r["t"], r["re"], r["version"], r["tokens"]) == ("SYNCED", 4, 9, 100)
    r = raw.ask({"t": "DELTA", "id": 5, "base": 9, "ops": [{"op": "remove", "ids": ["s1"]}]})
    assert (r["t"], r["version"], r["tokens"]) == ("SYNCED", 10, 0)
    r = raw.ask({"t": "DELTA", "id": 6, "base": 10, "ops": [{"op": "remove", "ids": ["s1"]}]})
    assert r["t"] == "RESYNC" and "unknown section" in r["reason"]  # the mirror never diverges
    raw.ask({"t": "BYE", "id": 7})


async def test_a_context_larger_than_a_frame_goes_in_parts(proto_daemon: DaemonProcess) -> None:
    big = [sec(i, tokens=0, text=f"{i:05d} " + "y" * 4000) for i in range(200)]  # ~800 KB, 3+ frames
    async with AgentLink(proto_daemon.endpoint, agent="parts", budget=10_000_000) as link:
        await link.snapshot(big)
        mirror = (await link.status())["agents"][0]
        assert (mirror["sections"], mirror["version"]) == (200, link.context.version)
        assert mirror["tokens"] == sum(len(s.text) // 3 + 1 for s in big)  # counted by the daemon
        assert len(link._snapshot_frames(None)) >= 3
        huge = Section("huge", "tool_result", "z" * MAX_FRAME)
        with pytest.raises(LinkError) as info:
            await link.append(huge)
        assert info.value.code == "too_large" and "huge" not in link.context


def test_snapshot_parts_must_come_in_order(raw: Raw) -> None:
    raw.ask({"t": "HELLO", "id": 1, "agent": "order", "budget": 4000})
    w = sec(1).to_wire()
    e = raw.ask({"t": "SNAPSHOT", "id": 2, "version": 3, "part": 1, "sections": [w]})
    assert (e["code"], e["re"]) == ("invalid", 2) and "out of order" in e["message"]
    raw.send({"t": "SNAPSHOT", "version": 3, "part": 0, "more": True, "sections": [w]})
    r = raw.ask({"t": "DELTA", "id": 5, "base": 0, "version": 1, "ops": []})  # voids the staged part
    assert (r["t"], r["version"]) == ("SYNCED", 1)
    e = raw.ask({"t": "SNAPSHOT", "id": 3, "version": 3, "part": 1, "sections": [sec(2).to_wire()]})
    assert e["code"] == "invalid"
    raw.ask({"t": "BYE", "id": 4})


def test_frame_limits(raw: Raw, proto_daemon: DaemonProcess) -> None:
    e = raw.ask({"t": "STATUS", "id": 1, "pad": "x" * (MAX_FRAME + 200)})
    assert e["code"] == "too_large"
    raw.send(b"\x00" * (MAX_FRAME + 64 * 1024))  # over ZMQ_MAXMSGSIZE: the connection is dropped
    with pytest.raises(TimeoutError):
        raw.recv(1.0)
    with SyncAgentLink(proto_daemon.endpoint, agent="limits-ok", budget=4000) as good:
        good.append(sec(1), wait=True)
        assert good.status()["agents"][0]["sections"] == 1
        assert good.next_proposal(timeout=0) is None and good.ping() > 0 and good.alive


# --- proposals ------------------------------------------------------------------------------------------


async def test_a_stale_proposal_is_nacked(proto_daemon: DaemonProcess) -> None:
    async with AgentLink(proto_daemon.endpoint, agent="stale", budget=2000, reserve=0.2) as link:
        await link.append(*(sec(i) for i in range(1, 21)), wait=True)  # 2000 tokens > 1600
        p = await asyncio.wait_for(link.proposals.get(), 20)
        assert p.base <= link.context.version and p.tokens_after < p.tokens_before
        changed = link.context.get(p.replaces[0])
        assert changed is not None
        await link.replace(Section(changed.id, changed.kind, "edited", tokens=3))
        assert await link.apply(p) is False
        assert p.replaces[0] in link.context
        mirror = (await link.status())["agents"][0]
        assert mirror["nacks"] == 1 and mirror["version"] == link.context.version


async def test_a_proposal_lands_on_the_message_list(proto_daemon: DaemonProcess) -> None:
    first = [{"role": "system", "content": "agent"}, {"role": "user", "content": "go"}]
    t = Transcript("openai", first, count=lambda text: len(text) // 3 + 1)  # the daemon's count too
    async with AgentLink(proto_daemon.endpoint, agent="msgs", budget=3000, reserve=0.2) as link:
        await link.append(*t.sections(), wait=True)
        for k in range(12):
            call = {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
            msgs = [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{k}", "content": f"line {k} of output\n" * 40},
            ]
            await link.append(*t.add(*msgs), wait=True)
        p = await asyncio.wait_for(link.proposals.get(), 20)
        applied = await link.apply(p, onto=t)
        assert t.ids == link.context.ids()  # both changed, or neither
        if applied:
            digests = [m for m in t.messages if m["content"] and m["content"].startswith("[compactd digest")]
            assert digests and all(m["role"] == "user" for m in digests)
        tools = [m for m in t.messages if m["role"] == "tool"]
        calls = {c["id"] for m in t.messages for c in m.get("tool_calls") or []}
        assert all(m["tool_call_id"] in calls for m in tools)
        mirror = (await link.status())["agents"][0]
        assert (mirror["tokens"], mirror["version"]) == (link.context.tokens, link.context.version)


# --- scope, liveness ----------------------------------------------------------------------------------


async def test_status_is_scoped_to_the_asking_agent(proto_daemon: DaemonProcess, raw: Raw) -> None:
    async with (
        AgentLink(proto_daemon.endpoint, agent="scope-a", budget=4000) as a,
        AgentLink(proto_daemon.endpoint, agent="scope-b", budget=4000) as b,
    ):
        assert [x["agent"] for x in (await a.status())["agents"]] == ["scope-a"]
        assert [x["agent"] for x in (await b.status())["agents"]] == ["scope-b"]
        everyone = {x["agent"] for x in raw.ask({"t": "STATUS", "id": 1})["agents"]}
        assert {"scope-a", "scope-b"} <= everyone


async def test_heartbeats_keep_an_idle_agent_and_the_silent_expire(
    proto_daemon: DaemonProcess, raw: Raw
) -> None:
    raw.ask({"t": "HELLO", "id": 1, "agent": "silent", "budget": 4000})
    async with AgentLink(proto_daemon.endpoint, agent="idle", budget=4000) as link:
        await asyncio.sleep(2.5)  # twice agent_timeout_s without a request of its own
        assert link.alive and not link.detached
        assert (await link.status())["agents"][0]["agent"] == "idle"
        bye = await asyncio.to_thread(raw.recv, 3.0)
        assert bye == {"t": "BYE", "reason": "expired", "v": 1}
        e = raw.ask({"t": "DELTA", "id": 2, "base": 0, "ops": []})
        assert e["code"] == "not_attached"


async def test_an_expired_agent_attaches_again_by_itself(proto_daemon: DaemonProcess) -> None:
    async with AgentLink(proto_daemon.endpoint, agent="comeback", budget=4000, heartbeat=False) as link:
        await link.append(sec(1), sec(2), wait=True)
        await wait_until(lambda: link.detached, 5, "the daemon expires the silent link")
        assert link.detached == "expired"
        await link.append(sec(3))  # not_attached → HELLO + SNAPSHOT, on its own
        await wait_until(lambda: link.reattaches, 2.5, "the link reattaches")
        assert link.reattaches == 1 and not link.detached
        mirror = (await link.status())["agents"][0]
        assert (mirror["sections"], mirror["version"]) == (3, link.context.version)


async def test_bye_on_shutdown(tmp_path: Path) -> None:
    proc = await asyncio.to_thread(start, tmp_path)
    try:
        async with AgentLink(proc.endpoint, agent="leaving", budget=4000) as link:
            assert await asyncio.to_thread(proc.stop) == 0
            await wait_until(lambda: link.detached, 2, "the link hears BYE")
            assert link.detached == "shutdown"
    finally:
        proc.stop()


# --- malformed frames: each gets an ERROR, and a well-behaved agent keeps working ---------------------

TYPES = ["HELLO", "SNAPSHOT", "DELTA", "ACK", "NACK", "RECALL", "STATUS", "HEARTBEAT", "BYE"]
KNOWN = {*TYPES, "CHECKPOINT", "RESTORE"}  # requests a daemon may serve (the store fills in the last two)
INT = st.integers(-(2**63), 2**64 - 1)  # what msgpack can carry
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    INT,
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.lists(INT, max_size=3),
    st.dictionaries(st.text(max_size=5), INT, max_size=3),
)
EXTRA = st.dictionaries(
    st.text(min_size=1, max_size=8).filter(lambda k: k not in ("v", "t", "id")), JUNK, max_size=3
)
SECTION = {"id": "s1", "kind": "user", "text": "hi"}
# (type, field, values that are wrong for it): every frame built from these is invalid
BROKEN = {
    ("HELLO", "agent"): st.one_of(st.just(""), INT, st.text(min_size=129, max_size=140)),
    ("HELLO", "budget"): st.one_of(st.text(max_size=5), st.booleans(), st.integers(-5, 255), st.floats()),
    ("HELLO", "versions"): st.one_of(st.just([]), st.lists(st.integers(2, 99), min_size=1, max_size=3)),
    ("SNAPSHOT", "version"): st.one_of(st.integers(-(2**63), -1), st.text(max_size=3), st.none()),
    ("SNAPSHOT", "sections"): st.one_of(
        st.text(max_size=3),
        st.lists(st.fixed_dictionaries({"id": INT, "kind": st.just("user")}), min_size=1),
        st.just([SECTION, SECTION]),
        st.just([{**SECTION, "kind": ["user"]}]),
        st.just([{**SECTION, "ts": float("nan")}]),
    ),
    ("DELTA", "base"): st.one_of(st.text(max_size=3), st.floats(), st.integers(-(2**63), -1)),
    ("DELTA", "ops"): st.one_of(
        st.text(max_size=3),
        st.lists(JUNK, min_size=1, max_size=2),
        st.just([{"op": "append", "sections": [{"id": "x", "kind": "nope", "text": ""}]}]),
        st.just([{"op": "remove", "ids": [{"a": 1}]}]),
        st.just([{"op": "append"}]),
    ),
    ("ACK", "proposal"): st.one_of(INT, st.just(""), st.lists(st.text(), max_size=2)),
    ("NACK", "reason"): st.text(max_size=8).filter(lambda r: r not in ("stale", "rejected", "failed")),
    ("RECALL", "refs"): st.one_of(st.text(max_size=3), st.lists(INT, min_size=1, max_size=2)),
}
GOOD = {
    "HELLO": {"agent": "fuzzer", "budget": 4000},
    "SNAPSHOT": {"version": 1, "sections": []},
    "DELTA": {"base": 0, "version": 1, "ops": []},
    "ACK": {"proposal": "p1", "version": 1},
    "NACK": {"proposal": "p1", "reason": "stale"},
    "RECALL": {"refs": ["a1"]},
}


@st.composite
def malformed(draw: st.DrawFn) -> tuple[bytes | list[bytes], int | None]:
    """A frame the daemon must refuse, and the request id its ERROR must name (if any)."""
    rid = draw(st.one_of(st.none(), st.integers(0, 2**53 - 1)))
    head: dict[str, Any] = {} if rid is None else {"id": rid}
    kind = draw(st.sampled_from(["bytes", "not_a_map", "version", "type", "field", "multipart"]))
    if kind == "bytes":
        frame = draw(st.binary(max_size=64))
        try:
            obj = msgpack.unpackb(frame, raw=False, strict_map_key=True)
        except Exception:
            return frame, None
        assume_invalid = not isinstance(obj, dict) or obj.get("v") != 1 or not isinstance(obj.get("t"), str)
        return (frame if assume_invalid else b"\xc1"), None
    if kind == "not_a_map":
        return msgpack.packb(draw(st.one_of(st.lists(JUNK, max_size=3), INT, st.text()))), None
    if kind == "multipart":
        return [encode({"t": "STATUS"}), draw(st.binary(max_size=8))], None
    msg = {**draw(EXTRA), **head}
    if kind == "version":  # missing, wrong type or unsupported
        msg.update(t=draw(st.sampled_from(TYPES)), v=draw(JUNK.filter(lambda v: v != 1 or v is True)))
        return msgpack.packb(msg), rid
    msg["v"] = 1
    if kind == "type":  # not a string, or no such message
        msg["t"] = draw(st.one_of(st.text(max_size=12).filter(lambda t: t not in KNOWN), JUNK))
        return msgpack.packb(msg), rid
    (t, key) = draw(st.sampled_from(sorted(BROKEN)))
    msg.update(GOOD[t], t=t)
    msg[key] = draw(BROKEN[(t, key)])
    return msgpack.packb(msg), rid


@pytest.fixture(scope="module")
def fuzz_pair(proto_daemon: DaemonProcess) -> Iterator[tuple[Raw, SyncAgentLink]]:
    bad = Raw(proto_daemon.endpoint)
    assert bad.ask({"t": "HELLO", "id": 1, "agent": "fuzzer", "budget": 4000})["t"] == "WELCOME"
    good = SyncAgentLink(proto_daemon.endpoint, agent="bystander", budget=1_000_000)
    good.connect()
    try:
        yield bad, good
    finally:
        good.close()
        bad.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=malformed(), n=st.integers(0, 10**9))
def test_malformed_frames_get_errors_and_others_keep_working(
    fuzz_pair: tuple[Raw, SyncAgentLink], case: tuple[bytes | list[bytes], int | None], n: int
) -> None:
    bad, good = fuzz_pair
    frame, rid = case
    while bad.sock.poll(0):  # e.g. a BYE if the fuzzer was expired between examples
        bad.sock.recv()
    if not bad.ask({"t": "HEARTBEAT"})["attached"]:
        assert bad.ask({"t": "HELLO", "id": 1, "agent": "fuzzer", "budget": 4000})["t"] == "WELCOME"
    if isinstance(frame, list):
        bad.sock.send_multipart(frame)
    else:
        bad.send(frame)
    reply = bad.recv(5.0)
    assert reply["t"] == "ERROR", reply
    assert reply["code"] in {"bad_frame", "bad_version", "unknown_type", "invalid"}
    assert reply["message"]
    if rid is not None:
        assert reply.get("re") == rid
    assert bad.ask({"t": "HEARTBEAT"})["attached"] is True  # still attached: nothing was applied
    version = good.context.version
    good.append(Section(f"ok{version}-{n}", "user", "still here", tokens=1), wait=True)
    assert good.status()["agents"][0]["version"] == version + 1
