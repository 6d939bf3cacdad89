"""Per-token log-probabilities of a text under the local model, in one prefill.

The model reads ``prefix + pieces`` (pieces are lines, or any spans, in order) and llama.cpp returns
the logits of every position (``llama_batch.logits[i] = 1`` for the whole batch, read back with
``llama_get_logits``). The log-probability of token ``t[j]`` is ``logits[j-1, t[j]] -
logsumexp(logits[j-1])``. Each piece gets the sum of its tokens' log-probabilities and its token count;
callers turn that into self-information (``-sum / n``) or, with two prefixes, a conditional gain.

Runs on the engine's inference thread under its lock (``LlamaEngine.score``): the KV state of the
prefix is reused across calls like a gist's prefix. Text longer than the context is scored in
windows; every window starts again with the prefix, then continues the token stream where the last
one stopped (a piece cut by a window boundary is scored in two parts, summed).

The pieces are tokenized one by one with special tokens disabled, so a piece's tokens are exactly
its own (no token straddles two pieces) and a chat-template marker inside the text stays text.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from summarizer import pages

# Positions per decode when every position's logits are read back: the engine's settings.score_rows
# (at most n_batch). llama.cpp keeps an output buffer of rows x vocabulary x 4 bytes (49k vocabulary:
# 100 MB at 512 rows) that never shrinks, and the graph's result tensor of the same size: scoring in
# 512-row batches raised the daemon's RSS by 190 MB, in 128-row batches by 45 MB, at about the same
# speed (docs/BENCHMARKS.md, "Memory with the model"). 64 rows (the default since stop 32) take 24 MB
# less than 128 and score ~18 % slower ("[model] score_rows"; docs/BENCHMARKS.md, "Stop 31"). After
# each scoring the output buffer's pages go back to the kernel (summarizer.pages); the result
# tensor's stay resident.


class GenerationTimeout(TimeoutError):
    """Generation ran past its deadline and was stopped between tokens (or prefill chunks)."""


class Cancelled(Exception):
    """Raised inside the inference thread when the job was cancelled during prefill."""


class Context(Protocol):
    """What scoring uses of the engine (summarizer.engine.LlamaEngine): its llama.cpp context, the
    KV state it keeps, and its tokenizer. (A protocol, so that the engine imports this module and
    not the other way round.)"""

    settings: Any
    timeouts: int
    _kv: list[int]
    _kv_prefix: int
    _llm: Any

    @property
    def n_ctx(self) -> int: ...

    def tokenize(self, text: str, special: bool = True) -> list[int]: ...

    def _decode(self, batch: list[int], logits_all: bool) -> None: ...

    def _drop_kv(self, keep: int) -> None: ...


@dataclass(frozen=True)
class PieceScore:
    logprob: float  # sum of the piece's token log-probabilities (natural log, <= 0)
    tokens: int  # tokens the piece was scored as (0 for an empty piece)

    @property
    def self_information(self) -> float:
        """Mean surprisal per token, in nats (0 for an empty piece)."""
        return -self.logprob / self.tokens if self.tokens else 0.0


@dataclass(frozen=True)
class Scoring:
    pieces: tuple[PieceScore, ...]
    tokens: int  # data tokens scored
    evaluated: int  # tokens run through the model (data, window prefixes that were not reused)
    seconds: float


def token_logprobs(logits: Any, targets: Any, rows: int = 32) -> Any:
    """log p(targets[i]) under logits[i] (rows: positions, columns: the vocabulary), float64.

    In blocks of ``rows`` positions, exponentiated in place in one reused buffer: the log-softmax over
    a 49k vocabulary is the only work scoring adds to a prefill, and this halves it (no 100 MB
    temporaries per 512-token batch)."""
    import numpy as np  # here: the digest worker imports this module but never runs this (13 MB)

    logits = np.asarray(logits, dtype=np.float32)
    targets = np.asarray(targets, dtype=np.intp)
    out = np.empty(len(targets), dtype=np.float64)
    buf = np.empty((min(rows, len(targets)), logits.shape[1]), dtype=np.float32)
    for s in range(0, len(targets), rows):
        block = logits[s : s + rows]
        k = len(block)
        top = block.max(axis=1)
        np.subtract(block, top[:, None], out=buf[:k])
        np.exp(buf[:k], out=buf[:k])
        lse = top.astype(np.float64) + np.log(buf[:k].sum(axis=1, dtype=np.float64))
        out[s : s + k] = block[np.arange(k), targets[s : s + k]] - lse
    return out


def score_locked(
    engine: Context,
    prefix: str,
    pieces: Sequence[str],
    deadline: float,
    cancel: threading.Event,
) -> Scoring:
    """Score ``pieces`` after ``prefix`` (the caller holds the engine's lock)."""
    import numpy as np  # here: the digest worker imports this module but never runs this (13 MB)

    t0 = time.perf_counter()
    head = engine.tokenize(prefix, special=True) or engine.tokenize("\n")
    per_piece = [engine.tokenize(p, special=False) if p else [] for p in pieces]
    stream = [t for toks in per_piece for t in toks]
    owner = np.repeat(np.arange(len(per_piece)), [len(t) for t in per_piece])
    lp = np.zeros(len(stream), dtype=np.float64)
    room = engine.n_ctx - len(head) - 1
    step = max(1, min(engine.settings.score_rows, engine.settings.n_batch))
    if room < 16:
        raise ValueError(f"a prefix of {len(head)} tokens leaves no room in a {engine.n_ctx}-token context")
    evaluated = 0
    rows = 0  # the most positions one decode read back: the part of llama.cpp's logits buffer in use
    try:
        for w0 in range(0, len(stream), room):
            window = stream[w0 : w0 + room]
            # keep the prefix's KV state but evaluate its last token again: its logits predict window[0]
            keep = len(head) - 1 if engine._kv[: len(head)] == head and engine._kv_prefix == len(head) else 0
            engine._drop_kv(keep)
            engine._kv_prefix = len(head)
            if keep == 0 and len(head) > 1:
                engine._decode(head[:-1], logits_all=False)
                evaluated += len(head) - 1
            seq = [head[-1], *window]
            for s in range(0, len(seq) - 1, step):
                if cancel.is_set():
                    raise Cancelled
                if time.monotonic() > deadline:
                    engine.timeouts += 1
                    at = f"at token {w0 + s} of {len(stream)}"
                    raise GenerationTimeout(f"scoring exceeded its deadline {at}")
                batch = seq[s : s + step]
                targets = seq[s + 1 : s + 1 + len(batch)]
                engine._decode(batch, logits_all=True)
                evaluated += len(batch)
                rows = max(rows, len(batch))
                ptr = engine._llm._ctx.get_logits()
                logits = np.ctypeslib.as_array(ptr, shape=(len(batch), engine._llm.n_vocab()))
                lp[w0 + s : w0 + s + len(targets)] = token_logprobs(logits[: len(targets)], targets)
    finally:  # those rows stay resident until a decode overwrites them: handed back (summarizer.pages)
        if rows:
            address = ctypes.cast(engine._llm._ctx.get_logits(), ctypes.c_void_p).value or 0
            pages.drop(address, rows * engine._llm.n_vocab() * 4)
    sums = np.bincount(owner, weights=lp, minlength=len(per_piece)) if stream else np.zeros(len(pieces))
    scored = tuple(PieceScore(float(sums[i]), len(t)) for i, t in enumerate(per_piece))
    return Scoring(scored, len(stream), evaluated, time.perf_counter() - t0)
