"""Context windows of known models (tokens): the budget a conversation's daemon agent gets.

Matched by the longest prefix of the request's ``model``; ``--window MODEL=TOKENS`` overrides or
adds entries, ``--default-window`` covers the rest."""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_WINDOW = 128_000

KNOWN: Mapping[str, int] = {
    # Anthropic (the 1M-token beta needs a header; the standard window is the budget)
    "claude-": 200_000,
    # OpenAI
    "gpt-3.5-turbo": 16_385,
    "gpt-4-turbo": 128_000,
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4": 8_192,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "codex-": 200_000,
    # open models served by llama.cpp, vLLM, Ollama ... (their trained windows)
    "qwen2.5-coder": 32_768,
    "llama-3": 128_000,
    "smollm2": 8_192,
}


class Windows:
    def __init__(self, overrides: Mapping[str, int] | None = None, default: int = DEFAULT_WINDOW) -> None:
        table = {k.lower(): v for k, v in KNOWN.items()}
        table.update({k.lower(): int(v) for k, v in (overrides or {}).items()})
        if default <= 0 or any(v <= 0 for v in table.values()):
            raise ValueError("context windows must be positive token counts")
        # longest prefix first, so "gpt-4o" wins over "gpt-4"
        self._table = sorted(table.items(), key=lambda kv: -len(kv[0]))
        self.default = default

    def __call__(self, model: str) -> int:
        name = model.lower().rsplit("/", 1)[-1]  # "openai/gpt-4o" -> "gpt-4o"
        for prefix, window in self._table:
            if name.startswith(prefix):
                return window
        return self.default


def parse_override(text: str) -> tuple[str, int]:
    """``MODEL=TOKENS`` (command line) -> (model prefix, tokens)."""
    model, sep, tokens = text.rpartition("=")
    if not sep or not model or not tokens.isdigit() or int(tokens) <= 0:
        raise ValueError(f"expected MODEL=TOKENS, got {text!r}")
    return model, int(tokens)
