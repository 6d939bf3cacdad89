"""MQTT events against a real Mosquitto started here on a free loopback port, and a real daemon."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from ipc.client import AgentLink
from ipc.protocol import Proposal
from ipc.sections import Section
from tests.fixtures.broker import Broker
from tests.fixtures.daemon import status, wait_until
from tests.fixtures.net import free_port
from watcher.config.settings import MqttConfig
from watcher.eval.harness import DaemonProcess
from watcher.observe.events import EventPublisher, topic_segment

HOST = socket.gethostname()
BASE = f"compactd/v1/{topic_segment(HOST)}"
STATUS = f"{BASE}/status"

pytestmark = pytest.mark.broker


class Subscriber:
    """Collects every message on a topic filter (MQTT v5, QoS 1)."""

    def __init__(self, port: int, topics: str = "compactd/v1/#") -> None:
        self.port = port
        self.topics = topics
        self.messages: list[aiomqtt.Message] = []
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def _run(self) -> None:
        async with aiomqtt.Client("127.0.0.1", self.port, protocol=aiomqtt.ProtocolVersion.V5) as c:
            await c.subscribe(self.topics, qos=1)
            self._ready.set()
            async for m in c.messages:
                self.messages.append(m)

    async def __aenter__(self) -> Subscriber:
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self._ready.wait(), 10)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
            await self._task

    def find(self, pred: Callable[[aiomqtt.Message], bool]) -> list[aiomqtt.Message]:
        return [m for m in self.messages if pred(m)]

    async def wait(self, pred: Callable[[aiomqtt.Message], bool], within: float = 15) -> aiomqtt.Message:
        try:
            found = await wait_until(lambda: self.find(pred), within, "a matching message")
        except AssertionError as exc:
            seen = [(str(m.topic), m.payload) for m in self.messages]
            raise AssertionError(f"{exc}; seen: {seen}") from None
        return found[-1]


def on(
    topic: str, payload: bytes | None = None, retain: bool | None = None
) -> Callable[[aiomqtt.Message], bool]:
    return lambda m: (
        str(m.topic) == topic
        and (payload is None or m.payload == payload)
        and (retain is None or m.retain == retain)
    )


def event_topic(agent: str, kind: str) -> str:
    return f"{BASE}/{topic_segment(agent)}/events/{kind}"


def body(m: aiomqtt.Message) -> dict[str, Any]:
    assert isinstance(m.payload, bytes | bytearray)
    out: dict[str, Any] = json.loads(m.payload)
    return out


async def feed(link: AgentLink, start: int, count: int) -> list[Proposal]:
    """Append ``count`` tool outputs; return the proposals that arrived (not yet answered)."""
    got: list[Proposal] = []
    for i in range(start, start + count):
        text = "".join(f"row {i}.{j}: value={i * 31 + j} status=ok\n" for j in range(12))
        await link.append(Section(f"s{i}", "tool_result", text), wait=True)
        for _ in range(10):  # proposals arrive asynchronously: give the daemon a moment per turn
            if not link.proposals.empty():
                break
            await asyncio.sleep(0.005)
        while not link.proposals.empty():
            got.append(link.proposals.get_nowait())
    return got


async def apply_some(link: AgentLink, want: int, start: int = 0) -> tuple[list[Proposal], int]:
    applied: list[Proposal] = []
    i = start
    while len(applied) < want and i < start + 300:
        for p in await feed(link, i, 1):
            if await link.apply(p):
                applied.append(p)
        i += 1
    assert len(applied) >= want
    await link.status()
    return applied, i


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "d"
    d.mkdir()
    return d


def mqtt_daemon(workdir: Path, port: int) -> DaemonProcess:
    """A daemon (no model) publishing its events to the broker on ``port``."""
    return DaemonProcess(workdir, None, model=False, extra_args=("--mqtt", f"mqtt://127.0.0.1:{port}"))


async def online(sub: Subscriber, workdir: Path, port: int) -> DaemonProcess:
    """A daemon publishing to the broker on ``port``, once ``sub`` has seen it say online."""
    daemon = mqtt_daemon(workdir, port)
    try:
        await daemon.wait_ready(60)
        await sub.wait(on(STATUS, b"online"))
    except BaseException:
        daemon.stop()
        raise
    return daemon


async def test_online_events_and_offline(broker: Broker, workdir: Path) -> None:
    async with Subscriber(broker.port) as sub:
        daemon = await online(sub, workdir, broker.port)
        try:
            async with Subscriber(broker.port) as late:  # joins later: gets the retained status
                m = await late.wait(on(STATUS))
                assert m.payload == b"online" and m.retain

            agent = "ev/1 #x"  # needs escaping in a topic
            async with AgentLink(daemon.endpoint, agent=agent, budget=3000, reserve=0.2) as link:
                applied, i = await apply_some(link, 1)
                rejected: list[Proposal] = []
                while not rejected and i < 400:
                    rejected = await feed(link, i, 1)
                    i += 1
                await link.reject(rejected[0])
                await link.status()

                p = applied[0]
                sent = body(await sub.wait(on(event_topic(agent, "proposal_sent"))))
                assert sent["agent"] == agent and sent["host"] == HOST and sent["kind"] == "proposal_sent"
                done = await sub.wait(
                    lambda m: (
                        str(m.topic) == event_topic(agent, "proposal_applied")
                        and body(m)["proposal"] == p.proposal
                    )
                )
                assert body(done)["saved"] == p.tokens_before - p.tokens_after
                assert body(done)["invalidated_prefix_tokens"] == p.invalidated_prefix_tokens
                assert done.qos == 1  # published with QoS 1 (delivery is min(publish, subscribe))
                assert not done.retain
                assert done.properties is not None and done.properties.ContentType == "application/json"
                no = body(await sub.wait(on(event_topic(agent, "proposal_rejected"))))
                assert no["proposal"] == rejected[0].proposal and no["reason"] == "rejected"
            topic_agent = str(done.topic).split("/")[3]
            assert (
                urllib.parse.unquote(topic_agent) == agent
                and "/" not in topic_agent
                and "#" not in topic_agent
            )

            st = (await status(daemon))["daemon"]
            assert (
                st["mqtt"]["connected"] is True
                and st["mqtt"]["published"] >= 3
                and st["mqtt"]["dropped"] == 0
            )
        finally:
            assert daemon.stop() == 0
        await sub.wait(on(STATUS, b"offline"))
    async with Subscriber(broker.port) as late:
        m = await late.wait(on(STATUS))
        assert m.payload == b"offline" and m.retain


async def test_will_says_offline_when_the_daemon_dies(broker: Broker, workdir: Path) -> None:
    async with Subscriber(broker.port) as sub:
        daemon = await online(sub, workdir, broker.port)
        try:
            daemon.proc.kill()  # no chance to say goodbye: the broker publishes the will
            daemon.proc.wait(10)
            m = await sub.wait(on(STATUS, b"offline"))
            assert m.payload == b"offline"
        finally:
            daemon.stop()


@pytest.mark.slow
async def test_broker_down_changes_nothing_and_drops_are_counted(tmp_path: Path, workdir: Path) -> None:
    broker = Broker(tmp_path, free_port())  # not started yet
    daemon = mqtt_daemon(workdir, broker.port)
    try:
        await daemon.wait_ready(60)
        async with AgentLink(daemon.endpoint, agent="down-1", budget=3000, reserve=0.2) as link:
            t0 = time.monotonic()
            applied, i = await apply_some(link, 2)
            assert time.monotonic() - t0 < 20  # nothing waited for a broker
            st = (await status(daemon))["daemon"]
            assert st["mqtt"]["connected"] is False and st["mqtt"]["published"] == 0
            assert st["mqtt"]["dropped"] >= 2 * len(applied)  # sent + applied, at least

            broker.start()  # the daemon finds it on its own (back-off)
            try:
                async with Subscriber(broker.port) as sub:
                    await sub.wait(on(STATUS, b"online"), within=40)
                    more, i = await apply_some(link, 1, i)
                    await sub.wait(
                        lambda m: (
                            str(m.topic) == event_topic("down-1", "proposal_applied")
                            and body(m)["proposal"] == more[0].proposal
                        )
                    )
            finally:
                broker.stop()  # and loses it again

            before = (await status(daemon))["daemon"]["mqtt"]["dropped"]
            again, i = await apply_some(link, 1, i)
            st = (await status(daemon))["daemon"]
            assert st["mqtt"]["dropped"] > before
            assert st["mqtt"]["connected"] is False
            assert (await link.status())["agents"][0]["compactions"] == len(applied) + len(more) + len(again)
    finally:
        assert daemon.stop() == 0
    log = daemon.log_path.read_text()
    assert '"event": "mqtt_unavailable"' in log and '"event": "mqtt_connected"' in log


async def test_a_hung_broker_never_blocks_the_publisher(broker: Broker) -> None:
    """In process: the broker stops answering (SIGSTOP) while connected; publish() stays instant,
    the queue stays bounded, and stop() returns within its limit."""
    pub = EventPublisher(MqttConfig(url=f"mqtt://127.0.0.1:{broker.port}"), host="hung", queue_size=10)
    assert not pub.publish("proposal_sent", "a", {})  # not connected yet: dropped at once
    assert pub.dropped["disconnected"] == 1
    pub.start()
    await wait_until(lambda: pub.connected, 10, "the publisher connects")
    assert pub.connected
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.perf_counter()
        results = []
        for n in range(50):
            results.append(pub.publish("proposal_sent", "a", {"n": n}))
            await asyncio.sleep(0)  # let the drain task take the first one (and hang on its PUBACK)
        assert time.perf_counter() - t0 < 0.5
        assert pub.dropped["queue_full"] >= 50 - 11 and results.count(True) <= 11
        t0 = time.perf_counter()
        await pub.stop(timeout_s=1.0)
        assert time.perf_counter() - t0 < 3.0
    finally:
        broker.proc.send_signal(signal.SIGCONT)


def test_topic_segments_are_escaped_and_reversible() -> None:
    for name in ("plain", "a/b", "x+y#z", "_daemon", "$SYS", "100%", "ünïcode"):
        seg = topic_segment(name)
        assert not any(c in seg for c in "/+#") and not seg.startswith(("_", "$"))
        assert urllib.parse.unquote(seg) == name
    assert topic_segment("_daemon") != "_daemon"


async def test_reload_moves_the_publisher(broker: Broker, workdir: Path, tmp_path: Path) -> None:
    """SIGHUP with a new topic prefix: the old status goes offline, the new one online, events move."""
    cfg = tmp_path / "compactd.toml"
    cfg.write_text(f'[mqtt]\nurl = "mqtt://127.0.0.1:{broker.port}"\n')
    async with Subscriber(broker.port) as sub, Subscriber(broker.port, "site/#") as site:
        daemon = DaemonProcess(workdir, str(cfg), model=False)
        try:
            await daemon.wait_ready(60)
            await sub.wait(on(STATUS, b"online"))
            cfg.write_text(
                f'[mqtt]\nurl = "mqtt://127.0.0.1:{broker.port}"\ntopic_prefix = "site/compactd"\n'
            )
            daemon.proc.send_signal(signal.SIGHUP)
            new_status = f"site/compactd/{topic_segment(HOST)}/status"
            await site.wait(on(new_status, b"online"))
            await sub.wait(on(STATUS, b"offline"))
            async with AgentLink(daemon.endpoint, agent="moved", budget=3000, reserve=0.2) as link:
                await apply_some(link, 1)
            await site.wait(on(f"site/compactd/{topic_segment(HOST)}/moved/events/proposal_applied"))
            assert not sub.find(lambda m: "/moved/" in str(m.topic))  # nothing on the old prefix
        finally:
            assert daemon.stop() == 0
        await site.wait(on(new_status, b"offline"))
