"""The llama.cpp digest engine: one model, one inference thread, a queue in front.

The model is loaded once. All inference runs on a single worker thread (one llama context cannot
run two completions at once); callers await futures, so the asyncio loop never blocks. The fixed
instruction prefix comes first in every prompt, so llama.cpp reuses its KV cache across jobs.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GGUF_MAGIC = b"GGUF"


class ModelError(RuntimeError):
    """The model cannot be used (missing, unreadable, corrupt); the message names the path."""


class GenerationTimeout(TimeoutError):
    """Generation ran past its deadline and was stopped between tokens."""


@dataclass(frozen=True)
class EngineSettings:
    path: str
    n_ctx: int = 2048
    n_threads: int = 0  # 0 = the CPUs this process may run on
    n_batch: int = 512
    max_tokens: int = 128
    timeout_s: float = 60.0


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int
    reused_tokens: int  # prompt tokens whose KV state was reused from the previous job
    completion_tokens: int
    prefill_s: float
    decode_s: float
    stopped: str  # "stop" | "length" | "repetition"


_silenced = False


def silence_llama_logs() -> None:
    """Route llama.cpp's own stderr chatter to nowhere (our errors are raised, not printed)."""
    global _silenced  # noqa: PLW0603 - one process-wide C callback
    if _silenced:
        return
    import ctypes

    import llama_cpp

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def _drop(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        return None

    llama_cpp.llama_log_set(_drop, ctypes.c_void_p(0))
    globals()["_log_callback"] = _drop  # keep a reference: the C side holds a raw pointer
    _silenced = True


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_model_file(path: str) -> None:
    """Fail early with a clear message: missing, unreadable or not a GGUF file."""
    p = Path(path)
    if not p.is_file():
        raise ModelError(f"model file not found: {path}")
    try:
        with p.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ModelError(f"model file unreadable: {path}: {exc.strerror}") from exc
    if magic != GGUF_MAGIC:
        raise ModelError(f"model file is not a GGUF file (bad magic {magic!r}): {path}")


class LlamaEngine:
    """Owns one llama.cpp model and the single thread that runs it."""

    def __init__(self, settings: EngineSettings) -> None:
        check_model_file(settings.path)
        from llama_cpp import Llama  # heavy import, only where the model is used

        silence_llama_logs()
        self.settings = settings
        self.n_threads = settings.n_threads or default_threads()
        try:
            self._llm: Any = Llama(
                model_path=settings.path,
                n_ctx=settings.n_ctx,
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,
                n_batch=settings.n_batch,
                n_ubatch=settings.n_batch,
                verbose=False,
            )
        except Exception as exc:  # llama-cpp raises ValueError/RuntimeError on a corrupt file
            raise ModelError(f"model file could not be loaded: {settings.path}: {exc}") from exc
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
        self._lock = threading.Lock()
        self._closed = False
        self.jobs = 0
        self.prompt_tokens_total = 0
        self.reused_tokens_total = 0
        self.completion_tokens_total = 0
        self.prefill_s_total = 0.0
        self.decode_s_total = 0.0

    @property
    def n_ctx(self) -> int:
        return int(self._llm.n_ctx())

    def count_tokens(self, text: str) -> int:
        """Token count with the model's tokenizer (thread-safe: the vocabulary is read-only)."""
        return len(self._llm.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=False))

    def tokenize(self, text: str) -> list[int]:
        return list(self._llm.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=True))

    def detokenize(self, tokens: list[int]) -> str:
        return bytes(self._llm.detokenize(tokens)).decode("utf-8", "replace")

    async def generate(
        self,
        prefix: str,
        data: str,
        suffix: str,
        max_tokens: int | None = None,
        timeout_s: float | None = None,
    ) -> Generation:
        """Run one completion on the inference thread; the caller's loop stays free.

        ``prefix`` and ``suffix`` are trusted prompt text (special tokens allowed). ``data`` is
        untrusted: it is tokenized with special tokens disabled, so a section that contains
        ``<|im_start|>system`` stays plain text and cannot open a new turn.
        """
        if self._closed:
            raise ModelError("engine is closed")
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + (timeout_s or self.settings.timeout_s)
        cancel = threading.Event()
        fut = loop.run_in_executor(
            self._pool,
            self._generate_sync,
            prefix,
            data,
            suffix,
            max_tokens or self.settings.max_tokens,
            deadline,
            cancel,
        )
        try:
            return await fut
        except asyncio.CancelledError:
            cancel.set()  # checked between tokens
            raise

    def _generate_sync(
        self, prefix: str, data: str, suffix: str, max_tokens: int, deadline: float, cancel: threading.Event
    ) -> Generation:
        with self._lock:
            llm = self._llm
            tokens = (
                llm.tokenize(prefix.encode("utf-8", "replace"), add_bos=True, special=True)
                + llm.tokenize(data.encode("utf-8", "replace"), add_bos=False, special=False)
                + llm.tokenize(suffix.encode("utf-8", "replace"), add_bos=False, special=True)
            )
            reused = _common_prefix(list(llm._input_ids[: llm.n_tokens]), tokens)
            room = self.n_ctx - len(tokens) - 1
            if room < 8:
                raise ValueError(
                    f"prompt of {len(tokens)} tokens leaves no room in a {self.n_ctx}-token context"
                )
            max_tokens = min(max_tokens, room)
            t0 = time.perf_counter()
            first: float | None = None
            pieces: list[str] = []
            n_out = 0
            stopped = "length"
            stream = llm.create_completion(
                tokens,
                max_tokens=max_tokens,
                temperature=0.0,
                top_k=1,
                repeat_penalty=1.1,
                stop=["<|im_end|>", "<|im_start|>"],
                stream=True,
                seed=0,
            )
            for chunk in stream:
                if first is None:
                    first = time.perf_counter()
                if cancel.is_set():
                    stopped = "cancelled"
                    break
                if time.monotonic() > deadline:
                    raise GenerationTimeout(f"generation exceeded its deadline after {n_out} tokens")
                choice = chunk["choices"][0]
                pieces.append(choice["text"])
                n_out += 1
                if choice.get("finish_reason"):
                    stopped = "stop" if choice["finish_reason"] == "stop" else "length"
                if _repeating("".join(pieces[-48:])):
                    stopped = "repetition"
                    break
            end = time.perf_counter()
            first = first or end
            gen = Generation(
                text="".join(pieces).strip(),
                prompt_tokens=len(tokens),
                reused_tokens=reused,
                completion_tokens=n_out,
                prefill_s=first - t0,
                decode_s=end - first,
                stopped=stopped,
            )
            self.jobs += 1
            self.prompt_tokens_total += gen.prompt_tokens
            self.reused_tokens_total += gen.reused_tokens
            self.completion_tokens_total += gen.completion_tokens
            self.prefill_s_total += gen.prefill_s
            self.decode_s_total += gen.decode_s
            return gen

    def stats(self) -> dict[str, float]:
        prefilled = self.prompt_tokens_total - self.reused_tokens_total
        return {
            "jobs": self.jobs,
            "prompt_tokens": self.prompt_tokens_total,
            "reused_prompt_tokens": self.reused_tokens_total,
            "completion_tokens": self.completion_tokens_total,
            "prefill_tps": prefilled / self.prefill_s_total if self.prefill_s_total else 0.0,
            "decode_tps": self.completion_tokens_total / self.decode_s_total if self.decode_s_total else 0.0,
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._llm.close()


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _repeating(tail: str) -> bool:
    """True when the output is looping: a chunk of 8-40 chars repeated at least 3 times at the end."""
    for size in range(8, 41):
        if len(tail) >= size * 3:
            chunk = tail[-size:]
            if tail.endswith(chunk * 3):
                return True
    return False
