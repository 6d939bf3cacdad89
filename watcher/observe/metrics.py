"""Prometheus metrics: what the daemon is doing, scraped over HTTP (default off; e.g. 127.0.0.1:9464).

Two kinds of series:

- live values read from the server at scrape time (agents, per-agent usage and headroom, the
  summarizer queue, protocol errors by code, MQTT state), so they can never drift from the truth;
- counters fed by the server's events (compactions, tokens saved, invalidated prefix tokens,
  proposals by outcome, digest latency), which survive agents detaching.

Label cardinality is bounded: per-agent series exist for at most :data:`MAX_AGENT_SERIES` agents
(those with the least headroom; the rest are counted in ``compactd_agents_unlisted``); error codes
are the protocol's fixed set; outcomes and reasons are fixed sets.

The exporter is a small asyncio HTTP server on the daemon's event loop, so a scrape reads the
server's state between two frames (no locks, no torn reads) and a hung loop fails the scrape, which
is what a monitor should see. Encoding (text or OpenMetrics, by ``Accept``) is prometheus-client's.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import Callable, Iterable, Mapping, Sized
from typing import Any, Final, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from ipc.context import Context
from ipc.protocol import E
from summarizer.digest import Summarizer
from watcher.observe import digests, logs

log = logs.get("compactd.metrics")

MAX_AGENT_SERIES: Final = 100
ERROR_CODES: Final = frozenset(v for k, v in vars(E).items() if k.isupper() and isinstance(v, str))
OUTCOMES: Final = ("sent", "applied", "stale", "rejected", "failed", "dropped")
DIGEST_METHODS: Final = digests.METHODS
MODEL_SKIPPED: Final = digests.SKIP_REASONS
DEGRADE_LEVELS: Final = digests.LEVELS[1:]  # a level below normal
LATENCY_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
HEADER_TIMEOUT_S: Final = 5.0
MAX_HEADER_BYTES: Final = 16 * 1024


class EventStats(Protocol):
    """What the MQTT publisher exposes (watcher.observe.events.EventPublisher)."""

    @property
    def connected(self) -> bool: ...

    @property
    def published(self) -> int: ...

    @property
    def dropped(self) -> Mapping[str, int]: ...


class Budget(Protocol):
    @property
    def budget(self) -> int: ...

    @property
    def reserve(self) -> float: ...


class AgentGauges(Protocol):
    """What the per-agent series read from one agent (watcher.serve.session.Session)."""

    @property
    def agent(self) -> str: ...

    @property
    def usage(self) -> float: ...

    @property
    def ctx(self) -> Context: ...

    @property
    def marks(self) -> Budget: ...

    @property
    def pending(self) -> Sized: ...

    @property
    def degrade(self) -> int: ...


class Served(Protocol):
    """What the live series read from the server at scrape time (watcher.serve.server.Server)."""

    @property
    def agents(self) -> Mapping[str, AgentGauges]: ...

    @property
    def tasks(self) -> Sized: ...

    @property
    def summarizer(self) -> Summarizer: ...

    @property
    def errors(self) -> Mapping[str, int]: ...

    @property
    def frames(self) -> int: ...


class Metrics:
    """The registry, the event-fed counters, and the live collector over one server."""

    def __init__(self, server: Served) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series (noise)
        self.server = server
        self.events: EventStats | None = None  # set (and swapped on reload) by the daemon
        # the store's background work (watcher.store.database.Database.background), set by the daemon
        self.store: Callable[[], Mapping[str, float]] | None = None
        # the serving loop's lag in seconds by quantile (watcher.serve.looplag.LoopLag.quantiles)
        self.loop_lag: Callable[[], Mapping[str, float]] | None = None
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.compactions = Counter("compactd_compactions", "Proposals applied by agents (ACKed)", registry=r)
        self.tokens_saved = Counter(
            "compactd_tokens_saved", "Context tokens removed by applied proposals", registry=r
        )
        self.invalidated = Counter(
            "compactd_invalidated_prefix_tokens",
            "Prompt-cache prefix tokens invalidated by applied proposals",
            registry=r,
        )
        self.proposals = _labelled(r, "compactd_proposals", "Proposals by outcome", "outcome", OUTCOMES)
        self.latency = Histogram(
            "compactd_summarizer_latency_seconds",
            "Time to build one digest (compressors + model), successful or not",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.alerts = Counter(
            "compactd_headroom_alerts",
            "Agents whose headroom could not be kept above the reserve",
            registry=r,
        )
        self.digests = _labelled(
            r, "compactd_digests", "Proposals built, by digest method", "method", DIGEST_METHODS
        )
        self.model_skipped = _labelled(
            r,
            "compactd_model_skipped",
            "Proposals of a daemon with a model whose digest is not the model's, by reason",
            "reason",
            MODEL_SKIPPED,
        )
        self.degradations = _labelled(
            r,
            "compactd_agent_degradations",
            "Agents degraded to a cheaper strategy under load (a job could not be done in time), by level",
            "level",
            DEGRADE_LEVELS,
        )
        self.reloads = _labelled(
            r, "compactd_config_reloads", "SIGHUP reloads by result", "result", ("ok", "failed")
        )
        r.register(_Live(self))
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)

    def on_event(self, kind: str, agent: str | None, fields: Mapping[str, Any]) -> None:
        """A :data:`watcher.serve.hub.Listener`: count what happened."""
        if kind == "proposal_sent":
            self.proposals.labels("sent").inc()
        elif kind == "proposal_applied":
            self.proposals.labels("applied").inc()
            self.compactions.inc()
            self.tokens_saved.inc(max(0, int(fields.get("saved", 0))))
            self.invalidated.inc(max(0, int(fields.get("invalidated_prefix_tokens", 0))))
        elif kind == "proposal_rejected":
            reason = fields.get("reason")
            self.proposals.labels(reason if reason in ("stale", "rejected", "failed") else "rejected").inc()
        elif kind == "proposal_dropped":
            self.proposals.labels("dropped").inc()
        elif kind == "digest":
            self.latency.observe(max(0.0, float(fields.get("seconds", 0.0))))
            if (method := fields.get("method")) in DIGEST_METHODS:
                self.digests.labels(method).inc()
            if (reason := fields.get("model_skipped")) in MODEL_SKIPPED:
                self.model_skipped.labels(reason).inc()
        elif kind == "agent_degraded":
            if (level := fields.get("level")) in DEGRADE_LEVELS:
                self.degradations.labels(level).inc()
        elif kind == "headroom_alert":
            self.alerts.inc()
        elif kind == "config_reloaded":
            self.reloads.labels("ok").inc()
        elif kind == "config_reload_failed":
            self.reloads.labels("failed").inc()

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition for an ``Accept`` header: (body, content type)."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


class _Live(Collector):
    """Series read from the server at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self.m = metrics

    def describe(self) -> Iterable[Metric]:
        return []  # names are fixed; nothing to check against the registry up front

    def collect(self) -> Iterable[Metric]:
        server = self.m.server
        agents = sorted(server.agents.values(), key=lambda a: (-a.usage, a.agent))
        listed = agents[:MAX_AGENT_SERIES]
        yield _gauge("compactd_agents", "Agents attached", len(agents))
        yield _gauge(
            "compactd_agents_unlisted",
            f"Agents without per-agent series (the {MAX_AGENT_SERIES} with least headroom have them)",
            len(agents) - len(listed),
        )
        per_agent: dict[str, tuple[str, Callable[[AgentGauges], float]]] = {
            "compactd_agent_tokens": (
                "Tokens in the agent's context (the daemon's mirror)",
                lambda a: a.ctx.tokens,
            ),
            "compactd_agent_budget_tokens": ("The agent's context budget", lambda a: a.marks.budget),
            "compactd_agent_usage_ratio": ("Context tokens / budget", lambda a: a.usage),
            "compactd_agent_headroom_ratio": (
                "1 - usage: the share of the budget still free",
                lambda a: 1 - a.usage,
            ),
            "compactd_agent_reserve_ratio": (
                "The headroom the daemon keeps free for the agent",
                lambda a: a.marks.reserve,
            ),
            "compactd_agent_pending_proposals": (
                "Proposals sent and not yet answered",
                lambda a: len(a.pending),
            ),
        }
        for name, (doc, value) in per_agent.items():
            fam = GaugeMetricFamily(name, doc, labels=["agent"])
            for a in listed:
                fam.add_metric([a.agent], float(value(a)))
            yield fam
        yield _gauge(
            "compactd_agents_degraded",
            "Agents whose compaction is degraded to a cheaper strategy under load",
            sum(a.degrade > 0 for a in agents),
        )
        worst = min((1.0 - a.usage for a in agents), default=1.0)
        yield _gauge("compactd_headroom_min_ratio", "The least headroom of any agent (1 with none)", worst)
        yield _gauge(
            "compactd_summarizer_queue_depth",
            "Compaction jobs in flight (running or waiting for the model)",
            len(server.tasks),
        )
        yield _gauge(
            "compactd_summarizer_degraded",
            "1 when digests are deterministic only (no model, or the model failed)",
            1.0 if server.summarizer.degraded else 0.0,
        )
        yield _gauge(
            "compactd_model_loaded",
            "1 when a llama.cpp model is loaded",
            0.0 if server.summarizer.engine is None else 1.0,
        )
        errors = CounterMetricFamily(
            "compactd_errors", "ERROR replies sent to clients, by code", labels=["code"]
        )
        folded: dict[str, int] = dict.fromkeys(sorted(ERROR_CODES), 0)
        for code, n in server.errors.items():
            key = code if code in ERROR_CODES else "other"
            folded[key] = folded.get(key, 0) + n
        for code, n in folded.items():
            errors.add_metric([code], n)
        yield errors
        yield CounterMetricFamily("compactd_frames", "Frames received from clients", value=server.frames)
        if self.m.loop_lag is not None:
            lag = GaugeMetricFamily(
                "compactd_loop_lag_seconds",
                "How late the serving loop runs what is due, over the last 30 s (1: the largest)",
                labels=["quantile"],
            )
            for q, seconds in self.m.loop_lag().items():
                lag.add_metric([q], seconds)
            yield lag
        if self.m.store is not None:
            yield from _store_series(self.m.store())
        ev = self.m.events
        yield _gauge("compactd_mqtt_enabled", "1 when MQTT events are configured", 0.0 if ev is None else 1.0)
        if ev is not None:
            yield _gauge(
                "compactd_mqtt_connected", "1 while connected to the MQTT broker", float(ev.connected)
            )
            yield CounterMetricFamily(
                "compactd_events_published", "MQTT events the broker acknowledged", value=ev.published
            )
            dropped = CounterMetricFamily(
                "compactd_events_dropped",
                "MQTT events dropped (broker down, queue full, publish failed)",
                labels=["reason"],
            )
            for reason, n in sorted(ev.dropped.items()):
                dropped.add_metric([reason], n)
            yield dropped


def _store_series(bg: Mapping[str, float]) -> Iterable[Metric]:
    yield _gauge(
        "compactd_store_index_pending_rows",
        "Archived rows the search index has not reached yet (search scans them meanwhile)",
        bg["index_pending_rows"],
    )
    yield CounterMetricFamily(
        "compactd_store_indexed_rows", "Archived rows indexed by the search thread", value=bg["indexed_rows"]
    )
    yield CounterMetricFamily(
        "compactd_store_write_gate_wait_seconds",
        "Seconds the daemon's store transactions waited for a search-index slice being written",
        value=bg["write_gate_waited_s"],
    )
    checkpoints = CounterMetricFamily(
        "compactd_store_wal_checkpoints",
        "WAL checkpoints: run by the checkpoint thread (thread), run inside a commit because the WAL "
        "outgrew 4x its bound (inline), and of both those that copied the whole WAL (complete)",
        labels=["kind"],
    )
    for kind, key in (
        ("thread", "wal_checkpoints"),
        ("complete", "wal_checkpoints_complete"),
        ("inline", "wal_checkpoints_inline"),
    ):
        checkpoints.add_metric([kind], bg[key])
    yield checkpoints
    failures = CounterMetricFamily(
        "compactd_store_thread_failures",
        "Errors in the store's threads (the search indexer retries; a failed checkpoint waits for the next)",
        labels=["thread"],
    )
    failures.add_metric(["indexer"], bg["index_failures"])
    failures.add_metric(["checkpoint"], bg["wal_checkpoint_failures"])
    yield failures


def _labelled(r: CollectorRegistry, name: str, doc: str, label: str, values: Iterable[str]) -> Counter:
    """A counter with one label whose every value exists from the start (at 0)."""
    counter = Counter(name, doc, [label], registry=r)
    for value in values:
        counter.labels(value)
    return counter


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


# --- the HTTP exporter ------------------------------------------------------------------------------


class MetricsServer:
    """``GET /metrics`` (and ``/``) over HTTP/1.x on the event loop; one request per connection."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._server: asyncio.Server | None = None
        self.address = ""

    async def start(self, host: str, port: int) -> None:
        """Bind and listen; OSError (address in use, no such address) propagates to the caller."""
        self._server = await asyncio.start_server(self._handle, host, port, limit=MAX_HEADER_BYTES)
        sockname = self._server.sockets[0].getsockname()
        self.address = (
            f"[{sockname[0]}]:{sockname[1]}" if ":" in sockname[0] else f"{sockname[0]}:{sockname[1]}"
        )
        log.info("metrics_listening", address=self.address)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_S)
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                return  # a slow, truncated or oversized request gets no answer
            status, headers, body = self._respond(head)
            lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers), "Connection: close"]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    def _respond(self, head: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                fields[name.strip().lower()] = value.strip()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _plain("400 Bad Request", "bad request\n")
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            resp = _plain("405 Method Not Allowed", "only GET and HEAD\n")
            resp[1].append(("Allow", "GET, HEAD"))
            return resp
        if target not in ("/metrics", "/"):
            return _plain("404 Not Found", "compactd serves /metrics\n")
        body, content_type = self.metrics.render(fields.get("accept", ""))
        headers = [("Content-Type", content_type)]
        if gzip_accepted(fields.get("accept-encoding", "")):
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        return "200 OK", headers, b"" if method == "HEAD" else body


def _plain(status: str, text: str) -> tuple[str, list[tuple[str, str]], bytes]:
    body = text.encode()
    return status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))], body
