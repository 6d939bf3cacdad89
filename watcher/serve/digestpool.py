"""Deterministic digests in a worker process, so the daemon's event loop never computes one.

A deterministic digest of a large region is tens of milliseconds of pure Python. On the event loop
that is tens of milliseconds of ingest latency for every attached agent; on a thread it is worse
(the loop waits for the interpreter lock at every wake-up). A worker process runs it on another
core: the loop only pickles the region out and the digest back (about a millisecond).

The worker counts tokens exactly as the daemon does: with the model's own tokenizer, loaded
vocabulary-only (no weights, ~0.1 s), or with the same character estimate when there is no model.
It is started lazily, restarted with the right tokenizer when the model file changes, and if it
dies the digest is computed on the loop instead (for RETRY_S; then a fresh worker is started).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from summarizer.digest import Digest, Item, Summarizer, approx_tokens
from watcher.observe import logs

log = logs.get("compactd.digestpool")

_worker: Summarizer | None = None  # in the worker process
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
RETRY_S = 10.0  # after the worker failed, digests are computed on the loop this long
WORKER_NICE = 5  # the worker's niceness: when the cores are short, the daemon's loop (ingest) goes first


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this worker when the daemon dies, even by kill -9 (else it would wait on its
    queue forever, an orphan outside systemd's cgroup cleanup)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the daemon died before prctl took effect
        os._exit(0)


def _init(model_path: str, parent: int) -> None:
    """Worker start: die with the daemon, ignore Ctrl-C (the daemon decides when to stop), load
    the tokenizer."""
    global _worker  # noqa: PLW0603 - one summarizer per worker process
    _die_with_parent(parent)
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    count: Callable[[str], int] = approx_tokens
    if model_path:
        from llama_cpp import Llama

        from summarizer.gguf import silence_llama_logs

        silence_llama_logs()
        vocab = Llama(model_path=model_path, vocab_only=True, verbose=False)

        def count(text: str) -> int:
            return len(vocab.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=False))

    _worker = Summarizer(None, count=count)


def _digest(items: list[Item], ref: str, target_tokens: int) -> Digest:
    assert _worker is not None
    return asyncio.run(_worker.digest(items, ref, target_tokens))


class DigestPool:
    """One worker process computing deterministic digests."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._model_path: str | None = None
        self._retry_at = 0.0  # after a failure, digests stay on the loop until then
        self.remote = 0  # digests computed by the worker
        self.local = 0  # digests computed on the loop because the worker failed
        self.restarts = 0

    def summarizer(self, like: Summarizer) -> Summarizer:
        """A model-less summarizer counting tokens like ``like``, whose digests run in the worker
        (on the loop if ``like`` counts with a function of its own, which the worker cannot copy)."""
        if getattr(like, "_count", None) is not None:
            return Summarizer(None, count=like.count)
        engine = like.engine
        return PooledSummarizer(self, like.count, engine.settings.path if engine is not None else "")

    def warm(self, like: Summarizer) -> None:
        """Start the worker now, not at the first digest: spawning it takes about a second (more
        on a busy machine), which the first proposal of a fresh daemon would otherwise wait for."""
        summarizer = self.summarizer(like)
        if isinstance(summarizer, PooledSummarizer) and self._pool is None:
            with contextlib.suppress(OSError, RuntimeError):
                self._ensure(summarizer.model_path).submit(int)  # runs the initializer

    def _ensure(self, model_path: str) -> ProcessPoolExecutor:
        if self._pool is not None and self._model_path == model_path:
            return self._pool
        self._shutdown()
        self._pool = ProcessPoolExecutor(
            max_workers=1,
            mp_context=multiprocessing.get_context("spawn"),  # never fork a process with threads
            initializer=_init,
            initargs=(model_path, os.getpid()),
        )
        self._model_path = model_path
        self.restarts += 1
        return self._pool

    async def digest(
        self, model_path: str, count: Callable[[str], int], items: Sequence[Item], ref: str, target: int
    ) -> Digest:
        loop = asyncio.get_running_loop()
        if loop.time() < self._retry_at:
            self.local += 1
            return await Summarizer(None, count=count).digest(items, ref, target)
        try:
            result = await loop.run_in_executor(self._ensure(model_path), _digest, list(items), ref, target)
        except (BrokenProcessPool, OSError, RuntimeError) as exc:  # the worker died or cannot start
            log.warning("digest_worker_failed", error=f"{type(exc).__name__}: {exc}", retry_s=RETRY_S)
            self._shutdown()
            self._retry_at = loop.time() + RETRY_S  # no restart storm if it cannot start at all
            self.local += 1
            return await Summarizer(None, count=count).digest(items, ref, target)
        self.remote += 1
        return result

    def _shutdown(self) -> None:
        if self._pool is not None:
            with contextlib.suppress(Exception):
                self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        self._shutdown()


class PooledSummarizer(Summarizer):
    def __init__(self, pool: DigestPool, count: Callable[[str], int], model_path: str) -> None:
        super().__init__(None, count=count)
        self._pool = pool
        self.model_path = model_path

    async def digest(
        self, items: Sequence[Item], ref: str, target_tokens: int, *, model_tokens: int | None = None
    ) -> Digest:
        return await self._pool.digest(self.model_path, self.count, items, ref, target_tokens)
