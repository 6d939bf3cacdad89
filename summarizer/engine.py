"""The llama.cpp digest engine: one model, one inference thread, a queue in front.

The model is loaded once. All inference runs on a single worker thread (one llama context cannot
run two completions at once); callers await futures, so the asyncio loop never blocks. That thread
runs at a lower priority (INFERENCE_NICE; llama.cpp's compute threads, started from it, inherit
it): when the cores are short, the process's serving loop goes first, and the model gets what is
left.

Prompts are ``prefix + data + suffix``. The trusted ``prefix`` (a fixed instruction) comes first, so
its KV state is reused across jobs: a job evaluates only its data and suffix. The engine drives
llama.cpp's decode loop itself (not ``create_completion``) so that

* prefill runs in ``n_batch`` chunks with the deadline and cancellation checked between chunks,
  and decoding checks them between tokens;
* the batch layout is fixed: the prefix is always evaluated as its own segment and the rest in
  ``n_batch`` chunks starting right after it, whether the prefix was reused or not. Together with
  greedy decoding this makes the output bytes a pure function of (model, settings, prompt): the
  same region gives the same digest in a warm engine, a cold one, or another process;
* reuse is counted exactly (tokens whose KV state was kept from the previous job);
* prompt-lookup decoding (draft tokens copied from the prompt, verified in one batch) is available
  as an option (``prompt_lookup``); the benchmark measures whether it helps.

Loading the model and the settings/result records live in summarizer.loader, the per-job decoding
(sampling, stop conditions, drafts) in summarizer.decoding; their public names are re-exported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar, Unpack

from summarizer.decoding import Decoder
from summarizer.gguf import ModelError
from summarizer.loader import EngineSettings, GenerateOptions, Generation, default_threads, load_model
from summarizer.logprobs import Cancelled as _Cancelled
from summarizer.logprobs import GenerationTimeout, Scoring, score_locked

__all__ = [
    "STOP_TEXT",
    "EngineSettings",
    "GenerateOptions",
    "Generation",
    "GenerationTimeout",
    "LlamaEngine",
    "default_threads",
]

STOP_TEXT = ("<|im_end|>", "<|im_start|>")
INFERENCE_NICE = 10  # added to the inference thread's niceness (Linux: per thread, inherited)
_R = TypeVar("_R")
_CANCELLED = Generation("", 0, 0, 0, 0, 0.0, 0.0, "cancelled")


@dataclass(frozen=True)
class _Job:
    """One completion as the inference thread runs it."""

    prefix: str
    data: str
    suffix: str
    max_tokens: int
    deadline: float
    cancel: threading.Event
    lookup: int  # draft tokens per step (0 = off)
    stop: tuple[str, ...]


def lower_thread_priority(by: int) -> None:
    """Raise the calling thread's niceness by ``by`` (Linux: per thread, inherited by the threads
    it starts; best effort: a seccomp filter or another OS may refuse, and then it runs at the
    process's priority). A thread pool's initializer: the inference thread's, the packer's."""
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + by)


class LlamaEngine:
    """Owns one llama.cpp model and the single thread that runs it."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.n_threads = settings.n_threads or default_threads()
        self._llm: Any
        # loaded_path: the file in use (the re-encoded one, or settings.path); weights_error: why
        # the re-encoded weights asked for are not in use ("" if they are, or none were asked for)
        self._llm, self.loaded_path, self.weights_error = load_model(settings, self.n_threads)
        self._pool = ThreadPoolExecutor(
            1, thread_name_prefix="llama", initializer=lower_thread_priority, initargs=(INFERENCE_NICE,)
        )
        self._lock = threading.Lock()
        self._closed = False
        self._kv: list[int] = []  # the tokens whose KV state the context holds, in order
        self._kv_prefix = 0  # the prefix length that state was laid out with
        self._primed: list[str] = []  # prefixes to evaluate again after a reload
        self.last: Generation | None = None  # the last finished job
        self.current_tokens = 0  # tokens generated so far by the job running now
        self.jobs = 0
        self.cancelled = 0
        self.timeouts = 0
        self.failures = 0
        self.reloads = 0
        self.prompt_tokens_total = 0
        self.reused_tokens_total = 0
        self.prefix_tokens_total = 0
        self.prefix_reused_total = 0
        self.prefilled_tokens_total = 0
        self.completion_tokens_total = 0
        self.drafted_total = 0
        self.accepted_total = 0
        self.prefill_s_total = 0.0
        self.decode_s_total = 0.0
        self.scored_tokens_total = 0
        self.score_s_total = 0.0

    # --- model facts -----------------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self.settings.path

    @property
    def weights_in_use(self) -> str:
        """The weight format in use: ``settings.weights`` if re-encoded weights are loaded, else ""
        (the file as shipped)."""
        return self.settings.weights if self.loaded_path != self.settings.path else ""

    @property
    def n_ctx(self) -> int:
        return int(self._llm.n_ctx())

    @property
    def n_params(self) -> int:
        import llama_cpp

        return int(llama_cpp.llama_model_n_params(self._llm.model))

    def count_tokens(self, text: str) -> int:
        """Token count with the model's tokenizer (thread-safe: the vocabulary is read-only).
        After close(), a conservative estimate (a retired engine may still be asked)."""
        if self._closed:
            return len(text) // 3 + 1
        return len(self._llm.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=False))

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return list(self._llm.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=special))

    def detokenize(self, tokens: list[int]) -> str:
        return bytes(self._llm.detokenize(tokens)).decode("utf-8", "replace")

    def prompt_tokens(self, prefix: str, data: str, suffix: str) -> tuple[list[int], int]:
        """The prompt as tokens and the length of its trusted prefix.

        ``prefix`` and ``suffix`` are trusted prompt text (special tokens allowed). ``data`` is
        untrusted: it is tokenized with special tokens disabled, so a section that contains
        ``<|im_start|>system`` stays plain text and cannot open a new turn.
        """
        llm = self._llm
        head = list(llm.tokenize(prefix.encode("utf-8", "replace"), add_bos=True, special=True))
        body = list(llm.tokenize(data.encode("utf-8", "replace"), add_bos=False, special=False))
        tail = list(llm.tokenize(suffix.encode("utf-8", "replace"), add_bos=False, special=True))
        return head + body + tail, len(head)

    def data_room(self, prefix: str, suffix: str, max_tokens: int) -> int:
        """How many data tokens fit in the context next to ``prefix``, ``suffix`` and the output."""
        fixed = len(self.prompt_tokens(prefix, "", suffix)[0])
        return max(0, self.n_ctx - fixed - max_tokens - 1)

    # --- jobs ------------------------------------------------------------------------------------
    async def generate(
        self, prefix: str, data: str, suffix: str, **opts: Unpack[GenerateOptions]
    ) -> Generation:
        """Run one completion on the inference thread; the caller's loop stays free.

        Raises GenerationTimeout past the deadline (counted from the call, so time spent queued
        behind other jobs counts), ModelError if the engine is closed, ValueError if the prompt does
        not fit the context. Cancelling the awaiting task stops the job at its next token.
        ``prompt_lookup`` overrides the engine's setting for this job (draft tokens per step);
        ``stop`` adds stop strings to the chat-template markers (the text ends before them).
        """
        if self._closed:
            raise ModelError("engine is closed")
        timeout_s, lookup, limit = opts.get("timeout_s"), opts.get("prompt_lookup"), opts.get("max_tokens")
        job = _Job(
            prefix,
            data,
            suffix,
            max_tokens=limit or self.settings.max_tokens,
            deadline=time.monotonic() + (timeout_s if timeout_s is not None else self.settings.timeout_s),
            cancel=threading.Event(),
            lookup=self.settings.prompt_lookup if lookup is None else lookup,
            stop=STOP_TEXT + opts.get("stop", ()),
        )
        try:
            return await self._run(self._guarded, lambda: self._generate_locked(job), _CANCELLED)
        except asyncio.CancelledError:
            job.cancel.set()  # checked between tokens
            raise

    async def score(self, prefix: str, pieces: Sequence[str], timeout_s: float | None = None) -> Scoring:
        """Log-probabilities of ``pieces`` (e.g. a region's lines, in order) read after ``prefix``,
        in one prefill on the inference thread (summarizer.logprobs). Same deadline, cancellation and
        errors as generate(); a cancelled job stops at its next batch."""
        if self._closed:
            raise ModelError("engine is closed")
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.settings.timeout_s)
        cancel = threading.Event()
        listed = list(pieces)
        try:
            return await self._run(
                self._guarded,
                lambda: self._score_locked(prefix, listed, deadline, cancel),
                Scoring((), 0, 0, 0.0),
            )
        except asyncio.CancelledError:
            cancel.set()
            raise

    def _score_locked(
        self, prefix: str, pieces: list[str], deadline: float, cancel: threading.Event
    ) -> Scoring:
        result = score_locked(self, prefix, pieces, deadline, cancel)
        self.scored_tokens_total += result.evaluated
        self.score_s_total += result.seconds
        return result

    def _guarded(self, job: Callable[[], _R], cancelled: _R) -> _R:
        """Run ``job`` on the inference thread holding the context's lock; a cancelled job gives
        ``cancelled``; timeouts and prompts that do not fit are the caller's, other failures counted."""
        with self._lock:
            try:
                return job()
            except _Cancelled:
                self.cancelled += 1
                return cancelled
            except (GenerationTimeout, ValueError):
                raise
            except Exception:
                self.failures += 1
                raise

    async def prime(self, prefix: str) -> int:
        """Evaluate ``prefix`` now so the next job reuses it (e.g. right after loading); returns its
        token count. The prefix is primed again after every reload."""
        return await self._run(self.prime_sync, prefix)

    def prime_sync(self, prefix: str) -> int:
        with self._lock:
            if prefix not in self._primed:
                self._primed.append(prefix)
            tokens, n_prefix = self.prompt_tokens(prefix, "", "")
            self._prefill(tokens[:n_prefix], n_prefix, time.monotonic() + 600.0, threading.Event())
            return n_prefix

    async def reload(self, path: str | None = None) -> None:
        """Load ``path`` (default: the current model file again) and swap it in between two jobs.

        Runs on the inference thread, so no job sees a half-loaded model. If the new model cannot be
        loaded, ModelError is raised and the current model stays in service.
        """
        await self._run(self.reload_sync, path)

    def reload_sync(self, path: str | None = None) -> None:
        settings = replace(self.settings, path=path or self.settings.path)
        with self._lock:
            new, loaded, weights_error = load_model(
                settings, self.n_threads
            )  # raises ModelError; the old stays
            old, self._llm, self.loaded_path, self.weights_error = self._llm, new, loaded, weights_error
            self.settings = settings
            self._kv = []
            self._kv_prefix = 0
            self.reloads += 1
            # not old.close(): a token count running on another thread may still hold the old
            # model; the last reference going away frees it (llama_cpp's finalizer)
            del old
        for prefix in list(self._primed):
            self.prime_sync(prefix)

    async def _run(self, fn: Callable[..., _R], *args: Any) -> _R:
        if self._closed:
            raise ModelError("engine is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, fn, *args)

    # --- the inference thread --------------------------------------------------------------------
    def _decode(self, batch: list[int], logits_all: bool) -> None:
        """Evaluate ``batch`` at the end of the KV state (positions len(_kv)...)."""
        llm = self._llm
        llm._batch.set_batch(batch=batch, n_past=len(self._kv), logits_all=logits_all)
        try:
            llm._ctx.decode(llm._batch)
        except Exception:
            self._drop_kv(0)  # the context's state is unknown after a failed decode
            raise
        self._kv.extend(batch)

    def _drop_kv(self, keep: int) -> None:
        self._llm._ctx.kv_cache_seq_rm(-1, keep, -1)
        del self._kv[keep:]
        if keep == 0:
            self._kv_prefix = 0

    def _reuse_point(self, tokens: list[int], n_prefix: int) -> int:
        """How much of the KV state to keep: the prefix (if the state was built on the same one),
        plus whole n_batch chunks after it that match, so that the batch layout is exactly the one
        of a cold evaluation. At least one token is always left to evaluate (its logits are needed)."""
        if self._kv_prefix != n_prefix or len(self._kv) < n_prefix:
            return 0
        common = 0
        for a, b in zip(self._kv, tokens, strict=False):
            if a != b:
                break
            common += 1
        if common < n_prefix:
            return 0
        if n_prefix == len(tokens):  # priming: nothing after the prefix
            return n_prefix
        whole = (min(common, len(tokens) - 1) - n_prefix) // self.settings.n_batch
        return n_prefix + max(0, whole) * self.settings.n_batch

    def _prefill(self, tokens: list[int], n_prefix: int, deadline: float, cancel: threading.Event) -> int:
        """Make the KV state hold ``tokens``; returns how many were reused. The prefix is its own
        segment; the rest goes in n_batch chunks from the end of the prefix. Deadline and
        cancellation are checked between chunks."""
        reused = self._reuse_point(tokens, n_prefix)
        self._drop_kv(reused)
        self._kv_prefix = n_prefix
        step = self.settings.n_batch
        spans = [(s, min(s + step, n_prefix)) for s in range(reused, n_prefix, step)]
        spans += [(s, min(s + step, len(tokens))) for s in range(max(reused, n_prefix), len(tokens), step)]
        for start, end in spans:
            if cancel.is_set():
                raise _Cancelled
            if time.monotonic() > deadline:
                self.timeouts += 1
                raise GenerationTimeout(f"prefill exceeded its deadline at token {start} of {len(tokens)}")
            self._decode(tokens[start:end], logits_all=False)
        return reused

    def _logits(self, i: int) -> Any:
        import numpy as np  # here: the digest worker imports this module but never runs this (13 MB)

        ptr = self._llm._ctx.get_logits_ith(i)
        return np.ctypeslib.as_array(ptr, shape=(self._llm.n_vocab(),))

    def _generate_locked(self, job: _Job) -> Generation:
        deadline, cancel = job.deadline, job.cancel
        tokens, n_prefix = self.prompt_tokens(job.prefix, job.data, job.suffix)
        room = self.n_ctx - len(tokens) - 1
        if room < 8 or len(tokens) <= n_prefix:
            raise ValueError(f"prompt of {len(tokens)} tokens leaves no room in a {self.n_ctx}-token context")
        t0 = time.perf_counter()
        reused = self._prefill(tokens, n_prefix, deadline, cancel)
        t1 = time.perf_counter()
        self.current_tokens = 0
        decoder = Decoder(self, tokens, min(job.max_tokens, room), job.stop)
        draft: list[int] = []
        while True:
            # the logits of the last batch predict the next token after each of its positions
            if decoder.verify(draft):
                break
            if cancel.is_set():
                decoder.stopped = "cancelled"
                self.cancelled += 1
                break
            if time.monotonic() > deadline:
                self.timeouts += 1
                raise GenerationTimeout(f"generation exceeded its deadline after {len(decoder.out)} tokens")
            draft = decoder.draft(job.lookup)
            self._decode([decoder.out[-1], *draft], logits_all=bool(draft))
        end = time.perf_counter()
        gen = Generation(
            text=decoder.text(),
            prompt_tokens=len(tokens),
            reused_tokens=reused,
            prefix_tokens=n_prefix,
            completion_tokens=len(decoder.out),
            prefill_s=t1 - t0,
            decode_s=end - t1,
            stopped=decoder.stopped,
            drafted=decoder.drafted,
            accepted=decoder.accepted,
        )
        self._account(gen)
        return gen

    def _account(self, gen: Generation) -> None:
        self.last = gen
        self.jobs += 1
        self.prompt_tokens_total += gen.prompt_tokens
        self.reused_tokens_total += gen.reused_tokens
        self.prefix_tokens_total += gen.prefix_tokens
        self.prefix_reused_total += min(gen.reused_tokens, gen.prefix_tokens)
        self.prefilled_tokens_total += gen.prompt_tokens - gen.reused_tokens
        self.completion_tokens_total += gen.completion_tokens
        self.drafted_total += gen.drafted
        self.accepted_total += gen.accepted
        self.prefill_s_total += gen.prefill_s
        self.decode_s_total += gen.decode_s

    def stats(self) -> dict[str, float]:
        return {
            "jobs": self.jobs,
            "cancelled": self.cancelled,
            "timeouts": self.timeouts,
            "failures": self.failures,
            "reloads": self.reloads,
            "prompt_tokens": self.prompt_tokens_total,
            "reused_prompt_tokens": self.reused_tokens_total,
            "prefix_tokens_full": self.prefix_tokens_total,
            "prefix_tokens_reused": self.prefix_reused_total,
            "completion_tokens": self.completion_tokens_total,
            "prefill_tps": _rate(self.prefilled_tokens_total, self.prefill_s_total),
            "decode_tps": _rate(self.completion_tokens_total, self.decode_s_total),
            "draft_tokens": self.drafted_total,
            "draft_accepted": self.accepted_total,
            "scored_tokens": self.scored_tokens_total,
            "score_tps": _rate(self.scored_tokens_total, self.score_s_total),
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._llm.close()


def _rate(n: float, seconds: float) -> float:
    return n / seconds if seconds else 0.0
