"""The proxy server and its whole lifecycle: ``async with Proxy(settings) as proxy`` binds the port,
serves, and on the way out stops accepting, lets requests in flight finish (bounded), says BYE to
the daemon for every conversation and closes the upstream connections.

Routes: ``POST /v1/chat/completions`` (OpenAI) and ``POST /v1/messages`` (Anthropic) go through the
conversation layer; ``GET /metrics`` and ``GET /compactd/status`` are the proxy's own; anything else
is forwarded unchanged. The compaction side never fails a request: if it breaks, the agent's bytes
go upstream as they came."""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from ipc.proxy import recall, wire
from ipc.proxy.conversation import Conversation, LinkSettings, Prepared
from ipc.proxy.metrics import Metrics
from ipc.proxy.registry import Conversations
from ipc.proxy.rules import CachePolicy
from ipc.proxy.upstream import Outcome, Upstream, error_response
from ipc.proxy.windows import DEFAULT_WINDOW, Windows

log = logging.getLogger("compactd.proxy")
MIB = 1 << 20


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` without a tokenizer: UTF-8 bytes / 3, rounded up. Errs high (BPE
    tokenizers give 3.5-4.5 bytes per token on English and code), so windows are not overrun."""
    return (len(text.encode("utf-8", "surrogatepass")) + 2) // 3


@dataclass(frozen=True)
class ProxySettings:
    listen: tuple[str, int] = ("127.0.0.1", 8787)
    upstream: str | None = None  # None: the provider's own API for each format
    socket: str = ""  # the daemon's endpoint
    windows: dict[str, int] = field(default_factory=dict)
    default_window: int = DEFAULT_WINDOW
    policy: CachePolicy = field(default_factory=CachePolicy)
    reserve: float = 0.5  # the daemon agent's reserve: it plans above (1 - reserve) of the window
    max_body: int = 32 * MIB  # the Anthropic Messages API's own request limit
    too_long: float = 2.0  # refuse requests estimated above this many windows (cannot fit anyway)
    shutdown_s: float = 10.0
    max_conversations: int = 256
    idle_s: float = 3600.0
    keep_bodies: int = 0  # the last N upstream chat bodies, in memory only (tests, debugging)
    recall_tool: bool = False  # offer compactd_recall to the model and answer it (recall.py)


class Proxy:
    def __init__(self, settings: ProxySettings) -> None:
        self.settings = s = settings
        link = LinkSettings(s.socket, estimate_tokens, s.policy, s.reserve, recall_tool=s.recall_tool)
        self.conversations = Conversations(
            link, Windows(s.windows, s.default_window), limit=s.max_conversations, idle_s=s.idle_s
        )
        self.upstream = Upstream(s.upstream)
        self.metrics = Metrics()
        self.port = 0
        self.app = web.Application(client_max_size=s.max_body)
        self.app.router.add_get("/metrics", self._metrics)
        self.app.router.add_get("/compactd/status", self._status)
        self.app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner: web.AppRunner | None = None
        self.sent: deque[tuple[str, bytes]] = deque(maxlen=s.keep_bodies or 1)

    async def __aenter__(self) -> Proxy:
        await self.upstream.start()
        self._runner = web.AppRunner(
            self.app, handle_signals=False, access_log=None, shutdown_timeout=self.settings.shutdown_s
        )
        try:
            await self._runner.setup()
            host, port = self.settings.listen
            site = web.TCPSite(self._runner, host, port)
            await site.start()
        except BaseException:
            await self._close()
            raise
        self.port = int(self._runner.addresses[0][1]) if self._runner.addresses else port
        log.info(
            "proxy_ready listen=%s:%d upstream=%s daemon=%s",
            host,
            self.port,
            self.settings.upstream,
            self.settings.socket,
        )
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()  # stops accepting, waits for requests in flight (bounded)
            self._runner = None
        await self.conversations.close()
        await self.upstream.close()
        log.info("proxy_stopped")

    # --- handlers -----------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        api = wire.api_of(request.path, request.headers)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            self.metrics.requests.labels(api, "413").inc()
            return error_response(api, 413, f"request body larger than {self.settings.max_body} bytes")
        name, prepared, conv, stream = "", Prepared(None), None, True
        if request.method == "POST" and request.path.rstrip("/") in wire.PATHS:
            try:
                req = wire.parse(api, body)
                stream = req.stream
            except wire.WireError as exc:
                self.metrics.requests.labels(api, str(exc.status)).inc()
                return error_response(api, exc.status, str(exc))
            try:
                conv, prepared = await self.conversations.prepare(req)
            except Exception:  # the compaction side never fails a request
                log.exception("proxy_internal_error path=%s", request.path)
                conv, prepared = None, Prepared(None)
            if conv is not None:
                name = conv.name
                if prepared.tokens_out > self.settings.too_long * conv.window:
                    self.metrics.requests.labels(api, "400").inc()
                    return error_response(
                        api,
                        400,
                        f"prompt is too long: about {prepared.tokens_out} tokens, the context window of "
                        f"{req.model or 'the model'} is {conv.window}",
                    )
            self.metrics.conversations.set(len(self.conversations.live))
        out = body if prepared.body is None else prepared.body
        if self.settings.keep_bodies and name:
            self.sent.append((name, out))
        overhead = time.perf_counter() - t0
        offer = self.settings.recall_tool and not stream and (prepared.digests or prepared.elided)
        if conv is not None and offer:
            response, outcome = await self._recall_turn(request, api, conv, out)
        else:
            response, outcome = await self.upstream.relay(request, api, out)
        self.metrics.record(api, name, prepared, outcome, overhead)
        return response

    async def _recall_turn(
        self, request: web.Request, api: wire.Api, conv: Conversation, body: bytes
    ) -> tuple[web.StreamResponse, Outcome]:
        """The turn with compactd_recall offered and its calls answered here (recall.py)."""
        out = Outcome()
        headers: CIMultiDict[str] = CIMultiDict()

        async def fetch(b: bytes) -> tuple[int, bytes]:
            nonlocal headers
            status, headers, data = await self.upstream.exchange(request, api, b)
            return status, data

        try:
            status, data, answered = await recall.run(api, recall.offer(api, body), fetch, conv.recall_text)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            out.status, out.upstream_error = 502, f"upstream failed: {type(exc).__name__}: {exc}"
            return error_response(api, 502, out.upstream_error), out
        self.metrics.recalls.inc(answered)
        out.status = status
        return web.Response(status=status, headers=headers, body=data), out

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response(self.status())

    def status(self) -> dict[str, Any]:
        cache = self.conversations.cache()
        return {
            "listen": f"{self.settings.listen[0]}:{self.port}",
            "conversations": [
                {
                    "agent": c.name,
                    "api": c.api,
                    "window": c.window,
                    "messages": len(c.chain),
                    "tokens_upstream": sum(t for _, t in c.previous),
                    "digests": len(c.digests),
                    "digests_waiting": len(c.acked),
                    "attached": c.link is not None and not c.broken,
                    "unmirrored": c.broken,
                    "cache_kept_fraction": round(c.stats.kept_fraction, 4),
                }
                for c in self.conversations
            ],
            "cache_kept_fraction": round(cache.kept_fraction, 4),
            "busts": dict(cache.busts),
            "forks": self.conversations.forks,
        }
