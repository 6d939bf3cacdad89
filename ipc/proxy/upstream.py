"""Forwarding to the model provider: the request's bytes and headers as they came (less hop-by-hop
headers), and the answer back as it comes, SSE streams chunk by chunk, compressed bodies still
compressed. Errors the proxy itself must report are in the API's own format."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from ipc.proxy import wire

log = logging.getLogger("compactd.proxy")

# RFC 9110 7.6.1 hop-by-hop headers, plus what aiohttp computes for the new connection.
HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
    )
)
DEFAULT_UPSTREAMS: dict[wire.Api, str] = {
    "openai": "https://api.openai.com",
    "anthropic": "https://api.anthropic.com",
}


@dataclass
class Outcome:
    status: int = 0
    streamed: bool = False
    upstream_error: str = ""  # the upstream failed (unreachable, dropped mid-stream)
    client_gone: bool = False  # the agent disconnected before the answer was written


def forward_headers(headers: Mapping[str, str]) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for k, v in headers.items():  # a multidict: repeated headers stay repeated
        if k.lower() not in HOP:
            out.add(k, v)
    return out


class Upstream:
    def __init__(
        self, base: str | None, connect_timeout_s: float = 10.0, read_timeout_s: float = 600.0
    ) -> None:
        self.base = base.rstrip("/") if base else None
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s
        )
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        # auto_decompress=False: a gzip'd answer goes back gzip'd, byte for byte
        self._session = aiohttp.ClientSession(
            timeout=self._timeout, auto_decompress=False, connector=aiohttp.TCPConnector(limit=0)
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def url(self, api: wire.Api, path_qs: str) -> str:
        return (self.base or DEFAULT_UPSTREAMS[api]) + path_qs

    async def relay(
        self, request: web.Request, api: wire.Api, body: bytes
    ) -> tuple[web.StreamResponse, Outcome]:
        """Send ``body`` upstream and answer ``request`` with what comes back."""
        assert self._session is not None, "Upstream.start() first"
        out = Outcome()
        try:
            resp = await self._session.request(
                request.method,
                self.url(api, request.path_qs),
                headers=forward_headers(request.headers),
                data=body if body or request.method not in ("GET", "HEAD") else None,
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
                allow_redirects=False,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            out.status, out.upstream_error = 502, f"upstream unreachable: {type(exc).__name__}: {exc}"
            return error_response(api, 502, out.upstream_error), out
        async with resp:
            out.status = resp.status
            headers = forward_headers(resp.headers)
            if not resp.headers.get("Content-Type", "").startswith("text/event-stream"):
                try:
                    data = await resp.read()
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    out.status, out.upstream_error = 502, f"upstream dropped the answer: {exc}"
                    return error_response(api, 502, out.upstream_error), out
                return web.Response(status=resp.status, headers=headers, body=data), out
            out.streamed = True
            stream = web.StreamResponse(status=resp.status, headers=headers)
            try:
                await stream.prepare(request)
            except (ConnectionError, RuntimeError):
                out.client_gone = True
                return stream, out
            await self._pipe(resp, stream, api, out)
            return stream, out

    async def exchange(
        self, request: web.Request, api: wire.Api, body: bytes
    ) -> tuple[int, CIMultiDict[str], bytes]:
        """One non-streaming POST of ``body``, read whole and uncompressed (the recall tool reads
        the answer); aiohttp's errors propagate."""
        assert self._session is not None, "Upstream.start() first"
        headers = forward_headers(request.headers)
        headers.popall("Accept-Encoding", None)
        async with self._session.post(
            self.url(api, request.path_qs),
            headers=headers,
            data=body,
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            allow_redirects=False,
        ) as resp:
            return resp.status, forward_headers(resp.headers), await resp.read()

    async def _pipe(
        self, resp: aiohttp.ClientResponse, stream: web.StreamResponse, api: wire.Api, out: Outcome
    ) -> None:
        try:
            async for chunk in resp.content.iter_any():
                try:
                    await stream.write(chunk)
                except (ConnectionError, RuntimeError):
                    out.client_gone = True  # the agent hung up: stop reading the upstream too
                    resp.close()
                    return
        except (aiohttp.ClientError, TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            out.upstream_error = f"upstream dropped the stream: {type(exc).__name__}: {exc}"
            try:
                await stream.write(wire.error_event(api, out.upstream_error))
            except (ConnectionError, RuntimeError):
                out.client_gone = True
                return
        try:
            await stream.write_eof()
        except (ConnectionError, RuntimeError):
            out.client_gone = True


def error_response(api: wire.Api, status: int, message: str) -> web.Response:
    return web.Response(
        status=status, body=wire.error_body(api, status, message), content_type="application/json"
    )
