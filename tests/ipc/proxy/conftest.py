"""Real parts for the proxy tests: llama.cpp's llama-server on the shipped GGUF as the upstream
(it speaks OpenAI chat completions and the Anthropic Messages API), a real daemon subprocess, and
the proxy itself serving on a loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ipc.proxy.app import Proxy, ProxySettings
from watcher.eval.bench.llama_server import (
    LlamaCppPythonServer,
    LlamaServer,
    ModelServer,
    UpstreamError,
    llama_server_binary,
)
from watcher.eval.harness import DaemonProcess, running_daemon


def _need_binary() -> None:
    if not llama_server_binary():  # fail, never skip (as for the model and the broker)
        pytest.fail("llama-server is missing: ./dev.sh setup builds it")


def _serve(server: ModelServer) -> Iterator[ModelServer]:
    try:
        server.wait()
    except UpstreamError:
        server.stop()
        raise
    yield server
    server.stop()


@pytest.fixture(scope="session")
def anthropic_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    """llama.cpp's llama-server: it speaks the Anthropic Messages API and OpenAI's."""
    _need_binary()
    yield from _serve(LlamaServer(tmp_path_factory.mktemp("llama-server"), ctx=32768))


@pytest.fixture(scope="session")
def openai_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    """llama-cpp-python's own OpenAI-compatible server."""
    yield from _serve(LlamaCppPythonServer(tmp_path_factory.mktemp("llama-cpp-python"), ctx=32768))


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[DaemonProcess]:
    """A real daemon without the model: the digests are the deterministic compressors' (the proxy
    is what is tested here, not the model)."""
    async with running_daemon(tmp_path, None, model=False) as proc:
        yield proc


def proxy_settings(upstream_url: str, endpoint: str, window: int = 32768, **kw: object) -> ProxySettings:
    return ProxySettings(
        listen=("127.0.0.1", 0),
        upstream=upstream_url,
        socket=endpoint,
        windows={"smollm2": window},
        keep_bodies=1000,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
async def openai_proxy(openai_upstream: ModelServer, daemon: DaemonProcess) -> AsyncIterator[Proxy]:
    async with Proxy(proxy_settings(openai_upstream.url, daemon.endpoint)) as p:
        yield p


@pytest.fixture
async def anthropic_proxy(anthropic_upstream: ModelServer, daemon: DaemonProcess) -> AsyncIterator[Proxy]:
    async with Proxy(proxy_settings(anthropic_upstream.url, daemon.endpoint)) as p:
        yield p
