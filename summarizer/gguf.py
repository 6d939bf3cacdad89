"""The model file itself: is it a GGUF file, and keep llama.cpp's own logging quiet.

Shared by the engine, the tokenizer and the weight re-encoder (summarizer.weights), which all open
model files; it imports llama_cpp only when asked to silence it.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

# llama.cpp's OpenMP threads spin while waiting by default. Next to an agent, its tools and other
# processes the cores are oversubscribed, and spinning threads starve each other: decoding measured
# 5-10x slower on a loaded 2-core machine (docs/BENCHMARKS.md). Sleep instead, unless the user chose.
# libgomp reads this once, when llama_cpp is first imported (always after this module).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

GGUF_MAGIC = b"GGUF"


class ModelError(RuntimeError):
    """The model cannot be used (missing, unreadable, corrupt); the message names the path."""


class ScoringUnsupported(ModelError):
    """The backend cannot score lines (a remote server that gives no prompt log-probabilities, and no
    local model to score instead): not a failure of the model, whose gists still work."""


_silenced = False


def silence_llama_logs() -> None:
    """Route llama.cpp's own stderr chatter to nowhere (our errors are raised, not printed)."""
    global _silenced  # noqa: PLW0603 - one process-wide C callback
    if _silenced:
        return
    import llama_cpp

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def _drop(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        return None

    llama_cpp.llama_log_set(_drop, ctypes.c_void_p(0))
    globals()["_log_callback"] = _drop  # keep a reference: the C side holds a raw pointer
    _silenced = True


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
