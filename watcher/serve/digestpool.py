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
The worker is a plain child process (watcher.serve.digestworker: pipes, no multiprocessing), fed by
one I/O thread here. It is started lazily, and if it dies the digest is computed on the loop
instead (for RETRY_S; then a fresh worker is started).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import IO

from summarizer.digest import Digest, Item, Summarizer, approx_tokens
from watcher.observe import logs
from watcher.planning.features import Features
from watcher.serve import digestworker

log = logs.get("compactd.digestpool")

REFIT = 0.05  # a worker digest whose real count is this far under its estimate is fitted once more
BIAS_WEIGHT = 0.1  # each digest's weight in the learnt bias (a geometric moving mean)
BIAS_MAX = 2.0  # the bias stays within [1/BIAS_MAX, BIAS_MAX]
RETRY_S = 10.0  # after the worker failed, digests are computed on the loop this long
STOP_S = 2.0  # close(): how long the worker may take to exit after its stdin closed, before SIGKILL


class WorkerDied(OSError):
    """The worker closed its pipe (it died, or never started)."""


class DigestPool:
    """One worker process computing deterministic digests."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        # the one thread that talks to the worker: it pickles a region out and the digest back off
        # the loop, and one exchange at a time (a cancelled caller's exchange still completes)
        self._io = ThreadPoolExecutor(1, thread_name_prefix="digestpool")
        self._lock = threading.Lock()
        self._retry_at = 0.0  # after a failure, digests stay on the loop until then
        self.remote = 0  # digests computed by the worker
        self.local = 0  # digests computed on the loop because the worker failed
        self.bias = 1.0  # the real count over the estimate, learnt (a digest is not quite its region)
        self.refits = 0  # worker digests fitted a second time (their estimate was off by > REFIT)
        self.restarts = 0
        self.features_remote = 0  # sections whose planner features the worker computed

    def summarizer(self, like: Summarizer) -> Summarizer:
        """A model-less summarizer counting tokens like ``like``, whose digests run in the worker."""
        return PooledSummarizer(self, like.count)

    def warm(self) -> None:
        """Start the worker now, not at the first digest: it takes a few hundred milliseconds to
        import the summarizer (more on a busy machine), which the first proposal of a fresh daemon
        would otherwise wait for."""
        with contextlib.suppress(OSError):
            self._ensure()

    @property
    def worker_pid(self) -> int | None:
        """The worker's pid while one runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _ensure(self) -> subprocess.Popen[bytes]:
        with self._lock:  # the loop (warm, shutdown) and the I/O thread (an exchange) both call it
            if self._proc is None:
                self._proc = subprocess.Popen(
                    digestworker.command(os.getpid()),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    close_fds=True,
                    start_new_session=False,  # in the daemon's process group and cgroup
                )
                self.restarts += 1
            return self._proc

    def _exchange(self, request: tuple[object, ...]) -> object:
        """On the I/O thread: one request and its reply (what the worker computed; it raises what
        the worker raised, WorkerDied if the worker is gone)."""
        proc = self._ensure()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            digestworker.write_frame(proc.stdin, request)
        except (BrokenPipeError, ValueError) as exc:  # ValueError: the pipe was closed meanwhile
            raise WorkerDied(f"the digest worker's pipe is closed: {exc}") from exc
        reply = digestworker.read_frame(proc.stdout)
        if reply is None:
            raise WorkerDied(f"the digest worker exited ({proc.poll()})")
        ok, value = reply if isinstance(reply, tuple) and len(reply) == 2 else (False, reply)
        if ok is True:
            return value
        if isinstance(value, BaseException):
            raise value
        raise WorkerDied(f"the digest worker replied {type(value).__name__}")

    async def digest(
        self, count: Callable[[str], int], items: Sequence[Item], ref: str, target: int
    ) -> Digest:
        loop = asyncio.get_running_loop()
        if loop.time() < self._retry_at:
            self.local += 1
            return await Summarizer(None, count=count).digest(items, ref, target)
        try:
            result = await self._fitted(count, list(items), ref, target)
        except (OSError, RuntimeError) as exc:  # the worker died, cannot start, or failed
            self._failed(exc, loop.time())
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
        value = await asyncio.get_running_loop().run_in_executor(
            self._io, self._exchange, ("digest", items, ref, target, bias)
        )
        if not isinstance(value, Digest):
            raise WorkerDied(f"the digest worker replied {type(value).__name__}, not a digest")
        return value

    async def features(self, texts: list[str], with_terms: bool) -> list[Features] | None:
        """The planner's features of ``texts``, computed in the worker (watcher.planning.features,
        the same function); None when the worker failed or is backing off (the caller computes
        them itself). Their names are interned here, as features() interns them in this process."""
        loop = asyncio.get_running_loop()
        if not texts or loop.time() < self._retry_at:
            return None
        try:
            value = await loop.run_in_executor(self._io, self._exchange, ("features", texts, with_terms))
        except (OSError, RuntimeError) as exc:  # the worker died, cannot start, or failed
            self._failed(exc, loop.time())
            return None
        if not isinstance(value, list) or len(value) != len(texts):
            return None
        if not all(isinstance(f, Features) for f in value):
            return None
        self.features_remote += len(value)
        return [interned(f) for f in value]

    def _failed(self, exc: BaseException, now: float) -> None:
        """The worker failed a request: kill it, and leave the work to the caller for RETRY_S (no
        restart storm if it cannot start at all)."""
        log.warning("digest_worker_failed", error=f"{type(exc).__name__}: {exc}", retry_s=RETRY_S)
        self._shutdown(kill=True)
        self._retry_at = now + RETRY_S

    def _shutdown(self, *, kill: bool) -> None:
        """Stop the worker (safe to call twice). ``kill``: at once (it failed); else EOF on its stdin
        ends it after the digest it may be computing, and SIGKILL after STOP_S. Its stdout is closed
        last: the I/O thread may be reading it until the worker exits."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        if kill:
            proc.kill()
        _close(proc.stdin)
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        _close(proc.stdout)

    def close(self) -> None:
        """Stop the worker and the I/O thread. The pool stays usable: a later digest starts both
        again (as the process pool it replaced did)."""
        self._shutdown(kill=False)
        self._io.shutdown(wait=False, cancel_futures=True)
        self._io = ThreadPoolExecutor(1, thread_name_prefix="digestpool")  # no thread until used


def interned(f: Features) -> Features:
    """``f`` with its names interned in this process (one string per name across all mirrors)."""
    return replace(f, idents=tuple(map(sys.intern, f.idents)))


def _close(pipe: IO[bytes] | None) -> None:
    if pipe is not None:
        with contextlib.suppress(OSError):
            pipe.close()


class PooledSummarizer(Summarizer):
    def __init__(self, pool: DigestPool, count: Callable[[str], int]) -> None:
        super().__init__(None, count=count)
        self._pool = pool

    async def digest(
        self, items: Sequence[Item], ref: str, target_tokens: int, *, model_tokens: int | None = None
    ) -> Digest:
        return await self._pool.digest(self.count, items, ref, target_tokens)
