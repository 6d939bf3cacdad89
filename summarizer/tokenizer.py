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


class LineCounts:
    """Token counts of texts that share most of their lines (a digest's renderings at several
    sizes), from cached per-line counts: the first line, then each line with the newline before it.
    With a BPE whose pre-tokenizer splits at newlines this is the exact count; a line ending in
    whitespace can make it differ by a token or so, so callers confirm a chosen text with the real
    counter. One instance per size search (the cache lives as long as it)."""

    def __init__(self, count: Callable[[str], int]) -> None:
        self._count = count
        self._seen: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        first, *rest = text.split("\n")
        return self._line(first) + sum(self._line("\n" + line) for line in rest)

    def _line(self, piece: str) -> int:
        n = self._seen.get(piece)
        if n is None:
            n = self._seen[piece] = self._count(piece) if piece else 0
        return n
