"""SyncAgentLink: AgentLink for agents that are not written with asyncio.

The link runs its own event loop in a daemon thread; every method blocks the caller until the
loop has done the work, so the caller sees the same behaviour as ``await link.method(...)``:

    with SyncAgentLink("ipc:///run/compactd/agents.sock", agent="coder-1", budget=128_000) as link:
        link.append(Section("m1", "user", "Fix the failing test"))
        proposal = link.next_proposal(timeout=0)       # None when nothing is waiting
        if proposal is not None and link.apply(proposal):
            ...

Heartbeats, RESYNC answers and re-attaching happen on the loop thread while the caller is busy.
``link.context`` is the live Context; read it between calls, not while another thread calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

from ipc.client import AgentLink, LinkError, Target
from ipc.context import Context
from ipc.protocol import Proposal
from ipc.sections import Section

R = TypeVar("R")


class SyncAgentLink:
    """The same constructor arguments as :class:`ipc.client.AgentLink` (``zmq_context`` excepted)."""

    def __init__(self, endpoint: str, agent: str, budget: int, **kwargs: Any) -> None:
        if "zmq_context" in kwargs:
            raise TypeError("SyncAgentLink makes its own asyncio ZeroMQ context")
        self._args = (endpoint, agent, budget)
        self._kwargs = kwargs
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"compactd-{agent}", daemon=True)
        self._thread.start()

        async def make() -> AgentLink:  # on the loop thread: the link's asyncio objects belong there
            return AgentLink(*self._args, **self._kwargs)

        self._link: AgentLink = self._call(make())

    def _call(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        if not self._thread.is_alive():
            coro.close()
            raise LinkError("closed", "the link is closed")
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError("no result in time") from None

    # --- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> SyncAgentLink:
        self.connect()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def connect(self) -> dict[str, Any]:
        try:
            return self._call(self._link.connect())
        except BaseException:
            self._stop()
            raise

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            self._call(self._link.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        async def cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self._call(cancel_rest(), timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    # --- what AgentLink has ----------------------------------------------------------------------
    @property
    def link(self) -> AgentLink:
        """The asyncio link underneath (touch it only from its loop)."""
        return self._link

    @property
    def context(self) -> Context:
        return self._link.context

    @property
    def welcome(self) -> dict[str, Any]:
        return self._link.welcome

    @property
    def high_watermark(self) -> int:
        return self._link.high_watermark

    @property
    def alive(self) -> bool:
        return self._link.alive

    @property
    def resyncs(self) -> int:
        return self._link.resyncs

    @property
    def errors(self) -> list[LinkError]:
        return self._link.errors

    def snapshot(self, sections: list[Section] | None = None) -> None:
        self._call(self._link.snapshot(sections))

    def append(self, *sections: Section, wait: bool = False) -> None:
        self._call(self._link.append(*sections, wait=wait))

    def replace(self, *sections: Section, wait: bool = False) -> None:
        self._call(self._link.replace(*sections, wait=wait))

    def remove(self, *ids: str, wait: bool = False) -> None:
        self._call(self._link.remove(*ids, wait=wait))

    def apply(self, proposal: Proposal, onto: Target | None = None) -> bool:
        return self._call(self._link.apply(proposal, onto))

    def reject(self, proposal: Proposal, reason: str = "rejected", detail: str = "") -> None:
        self._call(self._link.reject(proposal, reason, detail))

    def recall(self, *refs: str) -> dict[str, list[Section]]:
        return self._call(self._link.recall(*refs))

    def status(self) -> dict[str, Any]:
        return self._call(self._link.status())

    def ping(self) -> float:
        return self._call(self._link.ping())

    def request(self, msg: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        return self._call(self._link.request(msg, timeout_s))

    def reattach(self) -> None:
        self._call(self._link.reattach())

    def call(self, fn: Callable[[AgentLink], Coroutine[Any, Any, R]], timeout: float | None = None) -> R:
        """Run ``fn(link)`` on the link's loop and return its result: several steps in one hop."""
        return self._call(fn(self._link), timeout)

    def post(self, fn: Callable[[AgentLink], Coroutine[Any, Any, Any]]) -> None:
        """Run ``fn(link)`` on the link's loop without waiting for it (in order with later calls);
        an error it raises is kept in ``link.errors``."""
        if not self._thread.is_alive():
            raise LinkError("closed", "the link is closed")
        fut = asyncio.run_coroutine_threadsafe(fn(self._link), self._loop)
        fut.add_done_callback(self._posted)

    def _posted(self, fut: concurrent.futures.Future[Any]) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if exc is not None:
            self._link.errors.append(exc if isinstance(exc, LinkError) else LinkError("failed", str(exc)))

    def ready(self) -> int:
        """How many proposals have arrived and wait to be taken (no hop to the loop)."""
        return self._link.proposals.qsize()

    def next_proposal(self, timeout: float | None = None) -> Proposal | None:
        """The next proposal; wait up to ``timeout`` s (None: forever, 0: only what is there)."""

        async def get() -> Proposal | None:
            q = self._link.proposals
            if timeout == 0:
                return None if q.empty() else q.get_nowait()
            try:
                return await asyncio.wait_for(q.get(), timeout)
            except TimeoutError:
                return None

        return self._call(get())
