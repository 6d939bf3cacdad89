"""Loading the llama.cpp model for the engine: its settings, the record of one completion, and the
load itself (re-encoded weights if asked for, falling back to the shipped file)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from summarizer.gguf import ModelError, check_model_file, silence_llama_logs
from summarizer.weights import convert


@dataclass(frozen=True)
class EngineSettings:
    path: str
    n_ctx: int = 2048
    n_threads: int = 0  # 0 = the CPUs this process may run on
    n_batch: int = 512
    max_tokens: int = 128
    timeout_s: float = 60.0
    n_ubatch: int = 0  # 0 = n_batch
    prompt_lookup: int = 0  # draft tokens per step for prompt-lookup decoding; 0 = off
    flash_attn: bool = True  # faster prefill on CPU (docs/BENCHMARKS.md)
    n_threads_decode: int = 1  # threads for one-token steps; 1 is robust when cores are shared
    weights: str = ""  # "" = the file as shipped; else re-encode once (summarizer.weights.FORMATS)
    cache_dir: str = ""  # where re-encoded weights are cached ("" = the user's cache directory)
    # positions per scoring decode whose logits are read back (summarizer.logprobs): memory for
    # 2 x score_rows x vocabulary x 4 bytes while scoring (49k vocabulary: 24 MB at 64 rows), half
    # of it between scorings (summarizer.pages); more rows score faster ([model] score_rows)
    score_rows: int = 64


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int
    reused_tokens: int  # prompt tokens whose KV state was reused from the previous job
    prefix_tokens: int  # tokens of the trusted prefix (the part meant to be reused)
    completion_tokens: int
    prefill_s: float
    decode_s: float
    stopped: str  # "stop" | "length" | "repetition" | "cancelled"
    drafted: int = 0  # prompt-lookup draft tokens proposed ...
    accepted: int = 0  # ... and accepted


class GenerateOptions(TypedDict, total=False):
    """The per-job options of ``generate`` (every backend takes them as keywords)."""

    max_tokens: int | None  # None = the engine's setting
    timeout_s: float | None  # None = the engine's setting; counted from the call
    prompt_lookup: int | None  # draft tokens per step; None = the engine's setting
    stop: tuple[str, ...]  # stop strings besides the chat-template markers


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _open(settings: EngineSettings, path: str, n_threads: int) -> Any:
    from llama_cpp import Llama  # heavy import, only where the model is used

    try:
        return Llama(
            model_path=path,
            n_ctx=settings.n_ctx,
            n_threads=min(n_threads, settings.n_threads_decode or n_threads),
            n_threads_batch=n_threads,
            n_batch=settings.n_batch,
            n_ubatch=settings.n_ubatch or settings.n_batch,
            flash_attn=settings.flash_attn,
            use_mmap=False,  # mapped weights stay resident beside the repacked copy the CPU backend makes
            verbose=False,
        )
    except Exception as exc:  # llama-cpp raises ValueError/RuntimeError on a corrupt file
        raise ModelError(f"model file could not be loaded: {path}: {exc}") from exc


def load_model(settings: EngineSettings, n_threads: int) -> tuple[Any, str, str]:
    """The model, the file it came from, and why re-encoded weights (``settings.weights``) are not
    in use ("" if they are, or none were asked for). Re-encoding that fails (no writable cache, a
    damaged cached file) falls back to the shipped file: it still works, only slower."""
    check_model_file(settings.path)
    silence_llama_logs()
    error = ""
    if settings.weights:
        try:
            path = convert(settings.path, settings.weights, settings.cache_dir or None, n_threads)
        except ModelError as exc:
            error = str(exc)
        else:
            try:
                return _open(settings, path, n_threads), path, ""
            except ModelError as exc:  # damaged in the cache: drop it so that the next load re-encodes
                removed = _unlink(path)
                error = f"re-encoded weights unusable ({'removed' if removed else 'not removed'}): {exc}"
    return _open(settings, settings.path, n_threads), settings.path, error


def _unlink(path: str) -> bool:
    try:
        Path(path).unlink()
    except OSError:
        return False
    return True
