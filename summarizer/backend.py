"""What the Summarizer and selection need from an inference backend.

Two backends satisfy it: ``summarizer.engine.LlamaEngine`` (the local llama.cpp model, one inference
thread) and ``summarizer.remote.RemoteEngine`` (any OpenAI-compatible server over HTTP, with the
local engine as its fallback). Code that only needs these methods takes a ``Backend``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, Unpack

from summarizer.engine import EngineSettings, Generation
from summarizer.loader import GenerateOptions
from summarizer.logprobs import Scoring


class Backend(Protocol):
    settings: EngineSettings

    async def generate(
        self, prefix: str, data: str, suffix: str, **opts: Unpack[GenerateOptions]
    ) -> Generation: ...

    async def score(self, prefix: str, pieces: Sequence[str], timeout_s: float | None = None) -> Scoring: ...

    async def prime(self, prefix: str) -> int: ...

    async def reload(self, path: str | None = None) -> None: ...

    def data_room(self, prefix: str, suffix: str, max_tokens: int) -> int: ...

    def count_tokens(self, text: str) -> int: ...

    def stats(self) -> dict[str, float]: ...

    def close(self) -> None: ...
