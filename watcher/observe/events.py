"""MQTT events: what happens to each agent, published to a broker for dashboards and automations.

Topics (``<prefix>`` is ``mqtt.topic_prefix``, default ``compactd/v1``)::

    <prefix>/<host>/status                        "online" / "offline", retained; "offline" is also
                                                  the will, so a crash or a lost link says so too
    <prefix>/<host>/<agent>/events/<kind>         one JSON object per event, QoS ``mqtt.qos`` (1)
    <prefix>/<host>/_daemon/events/<kind>         daemon-wide events (degraded / recovered)

Kinds: ``proposal_sent``, ``proposal_applied``, ``proposal_rejected``, ``headroom_alert``,
``headroom_ok``, ``degraded``, ``recovered`` (the summarizer's model), ``agent_degraded``,
``agent_recovered`` (an agent's compaction strategy under load: watcher.serve.degrade).
The payload always has ``kind``, ``host``, ``agent`` (null for daemon-wide events) and ``ts``
(Unix seconds), plus the event's own fields.

Agent ids and the host name are made topic-safe by percent-encoding ``%``, ``/``, ``+``, ``#``,
NUL and a leading ``_`` or ``$``: an agent's topic can never collide with ``_daemon`` or another
agent's, and ``urllib.parse.unquote`` gives the id back.

The daemon never waits for the broker. :meth:`EventPublisher.publish` only puts the event on a
bounded queue (or drops and counts it when the broker is unreachable or the queue is full); one
named task owns the connection: ``async with aiomqtt.Client(...)`` is the connection's whole
lifecycle, and it is re-entered after a back-off (0.5 s doubling to 30 s, jittered) when the
broker goes away. MQTT v5 is used, with a content type and an expiry on event messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import socket
import time
from collections.abc import Mapping
from typing import Any, Final

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from watcher.config.settings import MqttConfig, parse_mqtt_url
from watcher.observe import logs

log = logs.get("compactd.events")
MQTT_LOGGER: Final = "compactd.mqtt"  # aiomqtt/paho log here; the root handler renders it via structlog

EVENT_KINDS: Final = frozenset(
    {
        "proposal_sent",
        "proposal_applied",
        "proposal_rejected",
        "headroom_alert",
        "headroom_ok",
        "degraded",
        "recovered",
        "agent_degraded",
        "agent_recovered",
    }
)
DAEMON_SEGMENT: Final = "_daemon"
QUEUE_SIZE: Final = 1000
EVENT_EXPIRY_S: Final = 3600  # a broker keeps an undelivered event this long for a persistent subscriber
BACKOFF_MIN_S: Final = 0.5
BACKOFF_MAX_S: Final = 30.0
KEEPALIVE_S: Final = 30
TIMEOUT_S: Final = 10.0  # connect and PUBACK wait
STOP_TIMEOUT_S: Final = 3.0

_STOP: Final = object()


def topic_segment(name: str) -> str:
    """``name`` as one MQTT topic level: ``%``, ``/``, ``+``, ``#``, NUL and a leading ``_``/``$``
    percent-encoded (reversible with urllib.parse.unquote)."""
    out = "".join(f"%{ord(c):02X}" if c in "%/+#\0" else c for c in name)
    if out[:1] in ("_", "$"):
        out = f"%{ord(out[0]):02X}" + out[1:]
    return out or "%00"


class EventPublisher:
    """Publishes daemon events to MQTT without ever making the daemon wait."""

    def __init__(self, cfg: MqttConfig, host: str | None = None, queue_size: int = QUEUE_SIZE) -> None:
        self.cfg = cfg
        self.broker_host, self.broker_port = parse_mqtt_url(cfg.url)
        self.host = host or socket.gethostname()
        self.base = f"{cfg.topic_prefix}/{topic_segment(self.host)}"
        self.status_topic = f"{self.base}/status"
        self._queue: asyncio.Queue[object] = asyncio.Queue(maxsize=queue_size)
        self._connected = False
        self._stopping = False
        self._stop_event = asyncio.Event()
        self._published = 0
        self._dropped: dict[str, int] = {"disconnected": 0, "queue_full": 0, "publish_failed": 0}
        self.connects = 0
        self._task: asyncio.Task[None] | None = None

    # --- what metrics and status read ---------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def published(self) -> int:
        return self._published

    @property
    def dropped(self) -> Mapping[str, int]:
        return self._dropped

    @property
    def dropped_total(self) -> int:
        return sum(self._dropped.values())

    def status(self) -> dict[str, Any]:
        return {
            "broker": self.cfg.url,
            "connected": self._connected,
            "published": self._published,
            "dropped": self.dropped_total,
            "queued": self._queue.qsize(),
        }

    # --- the producer side (called from the server; never blocks) -----------------------------------
    def topic(self, kind: str, agent: str | None) -> str:
        segment = DAEMON_SEGMENT if agent is None else topic_segment(agent)
        return f"{self.base}/{segment}/events/{kind}"

    def on_event(self, kind: str, agent: str | None, fields: Mapping[str, Any]) -> None:
        """A :data:`watcher.serve.hub.Listener`: publish the kinds in :data:`EVENT_KINDS`."""
        if kind in EVENT_KINDS:
            self.publish(kind, agent, fields)

    def publish(self, kind: str, agent: str | None, fields: Mapping[str, Any]) -> bool:
        """Queue one event; False (and counted) if it was dropped."""
        if not self._connected or self._stopping:
            self._dropped["disconnected"] += 1
            return False
        payload = {"kind": kind, "host": self.host, "agent": agent, "ts": round(time.time(), 3), **fields}
        try:
            self._queue.put_nowait((self.topic(kind, agent), json.dumps(payload, default=str).encode()))
        except asyncio.QueueFull:
            self._dropped["queue_full"] += 1
            return False
        return True

    # --- the connection task ------------------------------------------------------------------------
    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self.run(), name="mqtt-events")
        return self._task

    async def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Publish the retained "offline" (if connected), disconnect cleanly, end the task."""
        self._stopping = True
        self._stop_event.set()
        if self._task is None:
            return
        if self._connected:
            if self._queue.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    self._queue.get_nowait()
                    self._dropped["queue_full"] += 1
            self._queue.put_nowait(_STOP)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError, aiomqtt.MqttError):
                await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
        if not self._task.done():
            self._task.cancel()  # the broker did not acknowledge in time (or we were not connected)
            await asyncio.wait({self._task}, timeout=timeout_s)
            if not self._task.done():
                self._task.cancel()  # its clean-up is waiting for the broker too: give up on it
        try:
            await self._task
        except (asyncio.CancelledError, aiomqtt.MqttError):
            pass
        except Exception:  # a bug in the publisher must not stop the daemon's shutdown
            log.exception("mqtt_task_failed")

    async def run(self) -> None:
        """Connect, publish, reconnect with back-off, until cancelled or stopped."""
        will = aiomqtt.Will(self.status_topic, b"offline", qos=1, retain=True)
        client = aiomqtt.Client(
            self.broker_host,
            self.broker_port,
            identifier=f"compactd-{self.host}-{os.getpid()}"[:64],
            protocol=aiomqtt.ProtocolVersion.V5,
            will=will,
            keepalive=KEEPALIVE_S,
            timeout=TIMEOUT_S,
            logger=logging.getLogger(MQTT_LOGGER),
        )
        backoff = BACKOFF_MIN_S
        failures = 0
        while not self._stopping:
            try:
                async with client:  # the connection's whole lifecycle
                    await client.publish(self.status_topic, b"online", qos=1, retain=True)
                    self._connected = True
                    self.connects += 1
                    backoff, failures = BACKOFF_MIN_S, 0
                    log.info("mqtt_connected", broker=self.cfg.url, status_topic=self.status_topic)
                    await self._serve(client)
                    return  # stopped: "offline" published, the context manager disconnects cleanly
            except Exception as exc:  # MqttError: the broker is gone; anything else: log and go on
                if not isinstance(exc, aiomqtt.MqttError):
                    log.exception("mqtt_error", broker=self.cfg.url)
                was_connected = self._connected
                self._lost()
                failures += 1
                if was_connected or failures == 1:
                    log.warning("mqtt_unavailable", broker=self.cfg.url, error=str(exc), retry_in_s=backoff)
                else:
                    log.debug("mqtt_retry_failed", broker=self.cfg.url, error=str(exc), attempt=failures)
            finally:
                self._connected = False
            delay = backoff * random.uniform(0.8, 1.2)
            backoff = min(BACKOFF_MAX_S, backoff * 2)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_event.wait(), delay)

    def _lost(self) -> None:
        """The link is gone: what is still queued would be stale by the time it is back."""
        self._connected = False
        while True:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if item is not _STOP:
                self._dropped["disconnected"] += 1

    async def _serve(self, client: aiomqtt.Client) -> None:
        """Drain the queue while watching for the broker going away (whichever ends first)."""
        drain = asyncio.create_task(self._drain(client), name="mqtt-drain")
        watch = asyncio.create_task(_until_disconnected(client), name="mqtt-watch")
        try:
            done, _ = await asyncio.wait({drain, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (drain, watch):
                t.cancel()
            await asyncio.gather(drain, watch, return_exceptions=True)
        for t in done:
            t.result()  # re-raise MqttError (the link broke)

    async def _drain(self, client: aiomqtt.Client) -> None:
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        props.ContentType = "application/json"
        props.PayloadFormatIndicator = 1
        props.MessageExpiryInterval = EVENT_EXPIRY_S
        while True:
            item = await self._queue.get()
            if item is _STOP:
                await client.publish(self.status_topic, b"offline", qos=1, retain=True)
                return
            assert isinstance(item, tuple)
            topic, payload = item
            try:
                await client.publish(topic, payload, qos=self.cfg.qos, properties=props)
            except aiomqtt.MqttError:
                self._dropped["publish_failed"] += 1
                raise
            self._published += 1


async def _until_disconnected(client: aiomqtt.Client) -> None:
    """Returns never; raises MqttError when the broker goes away (we subscribe to nothing)."""
    async for _ in client.messages:
        pass
    raise aiomqtt.MqttError("message stream ended")
