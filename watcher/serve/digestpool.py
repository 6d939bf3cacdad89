"""Deterministic digests in a worker process, so the daemon's event loop never computes one.

A deterministic digest of a large region is tens of milliseconds of pure Python. On the event loop
that is tens of milliseconds of ingest latency for every attached agent; on a thread it is worse
(the loop waits for the interpreter lock at every wake-up). A worker process runs it on another
core: the loop only pickles the region out and the digest back (about a millisecond).

The worker holds no tokenizer (the model's vocabulary and llama.cpp cost it ~25 MB, a twentieth
of the daemon at the knee). It estimates: a BPE tokenizer first splits text into pieces (a word
with its leading space, a digit, a run of punctuation, whitespace: PIECES), and the region's
sections arrive with their exact token counts, so the region's tokens per piece are known; a
digest's pieces times that rate were 0.94-1.01 of its real count on the shared trajectories
(10th-90th percentiles; characters times the region's tokens per character: 0.84-1.04). The
daemon counts the digest it gets back with the real tokenizer (a few hundred tokens: microseconds)
and learns the estimate's bias (a digest's frame is not quite its region); when the digest is over
the target, or more than REFIT under the estimate (smaller than it had room for), the worker fits
it once more to a target corrected by that error, and the larger of the two that fits wins. On 80
trajectory regions at 1/4 and 1/8: 16 fitted twice, none over the target, the digests a median
0.967 of the target (counted in the worker with the tokenizer: 0.989).
Without a model both sides count with the same character estimate, and nothing is corrected.
It is started lazily, and if it dies the digest is computed on the loop instead (for RETRY_S; then
a fresh worker is started).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import math
import multiprocessing
import os
import re
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace

from summarizer.digest import Digest, Item, Summarizer, approx_tokens
from watcher.observe import logs
from watcher.serve import heap

log = logs.get("compactd.digestpool")

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
REFIT = 0.05  # a worker digest whose real count is this far under its estimate is fitted once more
BIAS_WEIGHT = 0.1  # each digest's weight in the learnt bias (a geometric moving mean)
BIAS_MAX = 2.0  # the bias stays within [1/BIAS_MAX, BIAS_MAX]
# a BPE pre-tokenizer's pieces (GPT-2's pattern, ASCII classes): contractions, a word or a digit with
# its leading space, a run of punctuation, whitespace
PIECES = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")
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


def _init(parent: int) -> None:
    """Worker start: die with the daemon, ignore Ctrl-C (the daemon decides when to stop)."""
    _die_with_parent(parent)
    heap.configure()
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def tokens_per_piece(items: Sequence[Item]) -> float:
    """The region's own rate, from its sections' exact counts."""
    pieces = sum(len(PIECES.findall(i.text)) for i in items if i.tokens > 0)
    tokens = sum(i.tokens for i in items if i.tokens > 0)
    return tokens / pieces if pieces and tokens else 1.0


def _digest(items: list[Item], ref: str, target_tokens: int, bias: float | None) -> Digest:
    """In the worker: the digest counted at the region's tokens per piece times ``bias`` (None:
    with approx_tokens, as the daemon counts without a model)."""
    if bias is None:
        count = approx_tokens
    else:
        rate = tokens_per_piece(items) * bias  # here, not on the loop: a region can be megabytes

        def count(text: str) -> int:
            return math.ceil(len(PIECES.findall(text)) * rate)

    try:
        return asyncio.run(Summarizer(None, count=count, off_loop=False).digest(items, ref, target_tokens))
    finally:
        heap.trim()  # the region's strings are freed: their pages go back (this process's own)


class DigestPool:
    """One worker process computing deterministic digests."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._retry_at = 0.0  # after a failure, digests stay on the loop until then
        self.remote = 0  # digests computed by the worker
        self.local = 0  # digests computed on the loop because the worker failed
        self.bias = 1.0  # the real count over the estimate, learnt (a digest is not quite its region)
        self.refits = 0  # worker digests fitted a second time (their estimate was off by > REFIT)
        self.restarts = 0

    def summarizer(self, like: Summarizer) -> Summarizer:
        """A model-less summarizer counting tokens like ``like``, whose digests run in the worker."""
        return PooledSummarizer(self, like.count)

    def warm(self) -> None:
        """Start the worker now, not at the first digest: spawning it takes about a second (more
        on a busy machine), which the first proposal of a fresh daemon would otherwise wait for."""
        if self._pool is None:
            with contextlib.suppress(OSError, RuntimeError):
                self._ensure().submit(int)  # runs the initializer

    def _ensure(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),  # never fork a process with threads
                initializer=_init,
                initargs=(os.getpid(),),
            )
            self.restarts += 1
        return self._pool

    async def digest(
        self, count: Callable[[str], int], items: Sequence[Item], ref: str, target: int
    ) -> Digest:
        loop = asyncio.get_running_loop()
        if loop.time() < self._retry_at:
            self.local += 1
            return await Summarizer(None, count=count).digest(items, ref, target)
        try:
            result = await self._fitted(count, list(items), ref, target)
        except (BrokenProcessPool, OSError, RuntimeError) as exc:  # the worker died or cannot start
            log.warning("digest_worker_failed", error=f"{type(exc).__name__}: {exc}", retry_s=RETRY_S)
            self._shutdown()
            self._retry_at = loop.time() + RETRY_S  # no restart storm if it cannot start at all
            self.local += 1
            return await Summarizer(None, count=count).digest(items, ref, target)
        self.remote += 1
        return result

    async def _fitted(self, count: Callable[[str], int], items: list[Item], ref: str, target: int) -> Digest:
        """The worker's digest, counted for real here; fitted once more if its estimate was off."""
        if count is approx_tokens:
            return await self._in_worker(items, ref, target, None)
        bias = self.bias
        first = await self._in_worker(items, ref, target, bias)
        # counted in a thread: the tokenizer (llama.cpp, the GIL released) takes ms for a large digest
        best = replace(first, tokens=await asyncio.to_thread(count, first.text))
        error = max(1, best.tokens) / max(1, first.tokens)
        self.bias = min(BIAS_MAX, max(1 / BIAS_MAX, bias * error**BIAS_WEIGHT))
        if first.tokens * (1 - REFIT) <= best.tokens <= target:
            return best
        self.refits += 1  # aim the worker's estimate where the real count lands on the target
        # the first one's bias: the corrected target already answers for this digest's error
        again = await self._in_worker(items, ref, max(1, int(target / error)), bias)
        second = replace(again, tokens=await asyncio.to_thread(count, again.text))
        fits = [d for d in (best, second) if d.tokens <= target]
        return max(fits, key=lambda d: d.tokens) if fits else min((best, second), key=lambda d: d.tokens)

    async def _in_worker(self, items: list[Item], ref: str, target: int, bias: float | None) -> Digest:
        return await asyncio.get_running_loop().run_in_executor(
            self._ensure(), _digest, items, ref, target, bias
        )

    def _shutdown(self) -> None:
        if self._pool is not None:
            with contextlib.suppress(Exception):
                self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        self._shutdown()


class PooledSummarizer(Summarizer):
    def __init__(self, pool: DigestPool, count: Callable[[str], int]) -> None:
        super().__init__(None, count=count)
        self._pool = pool

    async def digest(
        self, items: Sequence[Item], ref: str, target_tokens: int, *, model_tokens: int | None = None
    ) -> Digest:
        return await self._pool.digest(self.count, items, ref, target_tokens)
