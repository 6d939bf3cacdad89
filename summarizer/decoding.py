"""Greedy decoding of one job on the engine's inference thread: sampling with llama.cpp's classic
repetition penalty, the stop conditions (end-of-generation tokens, stop strings, a looping tail, the
length limit) and prompt-lookup drafting (draft tokens copied from the prompt, verified in one batch).

The engine is seen through ``DecodeState`` (a protocol), so that summarizer.engine imports this
module and not the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

REPEAT_PENALTY = 1.1  # llama.cpp's classic repetition penalty over the last REPEAT_LAST_N output tokens
REPEAT_LAST_N = 64


class DecodeState(Protocol):
    """What decoding uses of the engine (summarizer.engine.LlamaEngine): its llama.cpp model, the
    KV state it keeps, its settings, and the progress counter it reports."""

    settings: Any
    current_tokens: int
    _kv: list[int]
    _llm: Any

    @property
    def n_ctx(self) -> int: ...

    def _logits(self, i: int) -> Any: ...

    def _drop_kv(self, keep: int) -> None: ...


def greedy(logits: Any, recent: list[int]) -> int:
    """The most likely token, after the repetition penalty on ``recent`` output tokens."""
    import numpy as np  # here: the digest worker imports this module but never runs this (13 MB)

    if recent:
        logits = logits.copy()
        ids = np.fromiter(set(recent), dtype=np.intc)
        vals = logits[ids]
        logits[ids] = np.where(vals > 0, vals / REPEAT_PENALTY, vals * REPEAT_PENALTY)
    return int(np.argmax(logits))


class Decoder:
    """Greedy decoding state of one job: output tokens, stop conditions, prompt-lookup drafts."""

    def __init__(
        self, engine: DecodeState, prompt: list[int], max_tokens: int, stop: tuple[str, ...]
    ) -> None:
        import llama_cpp

        self.engine = engine
        self.stop = tuple(s.encode() for s in stop)
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.out: list[int] = []
        self.bytes = bytearray()
        self.stopped = ""
        self.drafted = 0
        self.accepted = 0
        vocab = engine._llm._model.vocab
        self._is_end: Callable[[int], bool] = lambda t: bool(
            llama_cpp.llama_vocab_is_eog(vocab, t) or llama_cpp.llama_vocab_is_control(vocab, t)
        )

    def verify(self, draft: list[int]) -> bool:
        """Sample from the last batch's logits; accept the draft tokens greedy decoding agrees with.
        Returns True when generation is over (``stopped`` says why)."""
        eng = self.engine
        n_kv = len(eng._kv)
        for j in range(len(draft) + 1):
            token = greedy(eng._logits(j if draft else -1), self.out[-REPEAT_LAST_N:])
            if self._emit(token):
                return True
            if j == len(draft) or token != draft[j]:
                if j < len(draft):  # the rest of the draft is wrong: forget its KV state
                    eng._drop_kv(n_kv - len(draft) + j)
                return False
            self.accepted += 1
        return False

    def _emit(self, token: int) -> bool:
        if self._is_end(token):
            self.stopped = "stop"
            return True
        self.out.append(token)
        self.engine.current_tokens = len(self.out)
        self.bytes += self.engine._llm.detokenize([token])
        tail = bytes(self.bytes[-200:])
        if any(s in tail for s in self.stop):
            self.stopped = "stop"
            return True
        if repeating(tail.decode("utf-8", "ignore")):
            self.stopped = "repetition"
            return True
        if len(self.out) >= self.max_tokens:
            self.stopped = "length"
            return True
        return False

    def draft(self, n_draft: int) -> list[int]:
        if n_draft <= 0:
            return []
        eng = self.engine
        room = min(
            self.max_tokens - len(self.out) - 1, eng.n_ctx - len(eng._kv) - 2, eng.settings.n_batch - 1
        )
        found = lookup(self.prompt + self.out, min(n_draft, room)) if room > 0 else []
        self.drafted += len(found)
        return found

    def text(self) -> str:
        result = bytes(self.bytes)
        for s in self.stop:
            result = result.split(s, 1)[0]
        return result.decode("utf-8", "replace").strip()


def lookup(history: list[int], n_draft: int, max_ngram: int = 3) -> list[int]:
    """Prompt-lookup drafting: find the latest earlier occurrence of the last n-gram (longest
    first) and propose the tokens that followed it."""
    n = len(history)
    for size in range(min(max_ngram, n - 1), 0, -1):
        tail = history[n - size :]
        for start in range(n - size - 1, -1, -1):
            if history[start : start + size] == tail:
                follow = history[start + size : start + size + n_draft]
                if follow:
                    return follow
    return []


def repeating(tail: str) -> bool:
    """True when the output is looping: a chunk of 8-40 chars repeated at least 3 times at the end."""
    for size in range(8, 41):
        if len(tail) >= size * 3:
            chunk = tail[-size:]
            if tail.endswith(chunk * 3):
                return True
    return False
