"""Count tokens with a GGUF model's own tokenizer, without loading its weights."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from summarizer.gguf import ModelError, check_model_file, silence_llama_logs


def load_counter(path: str) -> Callable[[str], int]:
    """A token counter backed by the model's vocabulary only (fast to load, no weights)."""
    check_model_file(path)
    from llama_cpp import Llama

    silence_llama_logs()
    try:
        vocab: Any = Llama(model_path=path, vocab_only=True, verbose=False)
    except Exception as exc:
        raise ModelError(f"model file could not be loaded: {path}: {exc}") from exc

    def count(text: str) -> int:
        return len(vocab.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=False))

    return count
