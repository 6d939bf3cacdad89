"""The proxy's Prometheus metrics (``GET /metrics`` on the proxy's own port) and its log line."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ipc.proxy.conversation import Prepared
from ipc.proxy.upstream import Outcome

log = logging.getLogger("compactd.proxy")


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "compactd_proxy_requests", "Requests by API and outcome", ["api", "outcome"], registry=r
        )
        self.tokens_in = Counter("compactd_proxy_tokens_in", "Estimated tokens the agents sent", registry=r)
        self.tokens_out = Counter("compactd_proxy_tokens_out", "Estimated tokens sent upstream", registry=r)
        self.applied = Counter(
            "compactd_proxy_digests_applied", "Proposals applied, by rule", ["rule"], registry=r
        )
        self.kept = Counter(
            "compactd_proxy_cache_kept_tokens", "Prefix tokens repeated byte-identically", registry=r
        )
        self.cacheable = Counter(
            "compactd_proxy_cache_prefix_tokens", "Prefix tokens the provider cached", registry=r
        )
        self.overhead = Histogram(
            "compactd_proxy_overhead_seconds",
            "Time in the proxy per request, upstream time excluded",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=r,
        )
        self.recalls = Counter(
            "compactd_proxy_recall_calls", "compactd_recall calls answered by the proxy", registry=r
        )
        self.conversations = Gauge("compactd_proxy_conversations", "Live conversations", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def record(self, api: str, conv: str, p: Prepared, out: Outcome, overhead_s: float) -> None:
        if out.client_gone:
            outcome = "client_gone"
        elif out.upstream_error:
            outcome = "upstream_error"
        else:
            outcome = str(out.status)
        self.requests.labels(api, outcome).inc()
        self.tokens_in.inc(p.tokens_in)
        self.tokens_out.inc(p.tokens_out)
        for rule in p.applied:
            self.applied.labels(rule).inc()
        self.kept.inc(p.kept)
        self.cacheable.inc(p.cacheable)
        self.overhead.observe(overhead_s)
        kept = f"{p.kept / p.cacheable:.3f}" if p.cacheable else "-"
        # never the headers: they carry the agent's credentials
        log.info(
            "request api=%s conversation=%s status=%s messages=%d new=%d tokens=%d->%d digests=%d applied=%d "
            "cache_kept=%s overhead_ms=%.2f%s",
            api,
            conv or "-",
            outcome,
            p.messages,
            p.new,
            p.tokens_in,
            p.tokens_out,
            p.digests,
            len(p.applied),
            kept,
            overhead_s * 1000,
            f" error={out.upstream_error!r}" if out.upstream_error else "",
        )
