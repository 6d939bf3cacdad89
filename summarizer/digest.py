"""Turn a region of sections into one digest that is always smaller than the region.

Layout of a digest (deterministic bytes for the same region and model):

    [compactd digest of N sections FIRST..LAST: T tokens archived as REF; recall REF for the originals]
    Key facts (verbatim): fact | fact | ...
    Summary (model-written from quoted data): The agent ...
    - ID kind: compressed rendering
    ...

Tool output is compressed deterministically (summarizer.compressors); the model only writes a
short gist of the prose parts, and the gist is checked against its source (summarizer.gist).
If the model is missing, slow or wrong, the digest is deterministic. If the result is not
smaller than the region, it is cut down with head/tail until it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from summarizer import gist
from summarizer.compressors import compress, head_tail
from summarizer.engine import Generation, LlamaEngine
from summarizer.facts import extract_facts

PROSE_KINDS = frozenset({"assistant", "user", "system", "other"})
GIST_INPUT_CHARS = 1600  # ~450 tokens: a gist costs ~3 s on 2 cores
GIST_MAX_TOKENS = 80


@dataclass(frozen=True)
class Item:
    """One section of a region, as the summarizer sees it (no dependency on the wire format)."""

    id: str
    kind: str
    text: str
    tokens: int


@dataclass(frozen=True)
class Digest:
    text: str
    tokens: int
    tokens_before: int
    method: str  # "model" when a checked gist is included, else "deterministic"
    facts: tuple[str, ...]
    gist_rejected: str  # why a gist was rejected ("" if accepted or not attempted)
    generation: Generation | None


def approx_tokens(text: str) -> int:
    """A conservative token estimate when no tokenizer is at hand (code runs ~3 chars/token)."""
    return len(text) // 3 + 1


class Summarizer:
    def __init__(self, engine: LlamaEngine | None, count: Callable[[str], int] | None = None) -> None:
        self.engine = engine
        self.count = count or (engine.count_tokens if engine else approx_tokens)
        self.degraded_reason = "" if engine else "no model"
        self.gists_accepted = 0
        self.gists_rejected = 0

    @property
    def degraded(self) -> bool:
        return bool(self.degraded_reason)

    async def digest(self, items: Sequence[Item], ref: str, target_tokens: int) -> Digest:
        before = sum(i.tokens for i in items)
        source = "\n".join(i.text for i in items)
        facts = tuple(extract_facts(source, max_facts=24))
        gen, gist_text, rejected = await self._gist(items)
        budget_chars = max(400, target_tokens * 3)
        for _ in range(6):
            text = render(items, ref, before, facts, gist_text, budget_chars)
            tokens = self.count(text)
            if tokens <= target_tokens or tokens < before * 0.5:
                break
            budget_chars = int(budget_chars * 0.6)
        if tokens >= before:  # never worse: cut to well under the region
            text = head_tail(text, max(64, min(len(text) // 2, before)), ref)
            tokens = self.count(text)
        method = "model" if gist_text else "deterministic"
        return Digest(text, tokens, before, method, facts, rejected, gen)

    async def _gist(self, items: Sequence[Item]) -> tuple[Generation | None, str, str]:
        if self.engine is None:
            return None, "", ""
        prose = "\n".join(f"{i.kind}: {i.text}" for i in items if i.kind in PROSE_KINDS)
        if len(prose) < 200:
            return None, "", ""
        data = gist.quote(prose[:GIST_INPUT_CHARS])
        try:
            gen = await self.engine.generate(gist.PREFIX, data, gist.SUFFIX, max_tokens=GIST_MAX_TOKENS)
        except Exception as exc:  # timeout, crash in llama.cpp: fall back, report degraded
            self.degraded_reason = f"model failed: {type(exc).__name__}: {exc}"
            return None, "", self.degraded_reason
        self.degraded_reason = ""
        text = gist.render_gist(gen.text)
        verdict = gist.check_gist(text.removeprefix(gist.LEAD), prose[:GIST_INPUT_CHARS])
        if gen.stopped == "repetition":
            verdict = gist.GistCheck(False, "repetition")
        if not verdict.ok:
            self.gists_rejected += 1
            return gen, "", verdict.reason
        self.gists_accepted += 1
        return gen, text, ""


def render(
    items: Sequence[Item], ref: str, before: int, facts: Sequence[str], gist_text: str, budget_chars: int
) -> str:
    first, last = items[0].id, items[-1].id
    lines = [
        f"[compactd digest of {len(items)} sections {first}..{last}: {before} tokens archived as {ref}; "
        f"recall {ref} for the originals]"
    ]
    if facts:
        lines.append(_facts_line(facts, budget_chars // 4))
    if gist_text:
        lines.append(f"Summary (model-written from quoted data): {gist_text}")
    used = sum(len(x) + 1 for x in lines)
    share = max(60, (budget_chars - used) // max(1, len(items)))
    for it in items:
        body = compress(it.text, ref=f"{ref}#{it.id}", max_chars=share).text
        lines.append(f"- {it.id} {it.kind}: {_one_block(body)}")
    return "\n".join(lines)


def _facts_line(facts: Sequence[str], max_chars: int) -> str:
    out = "Key facts (verbatim): "
    kept: list[str] = []
    for f in facts:
        if len(out) + sum(len(k) + 3 for k in kept) + len(f) > max_chars and kept:
            break
        kept.append(f)
    return out + " | ".join(kept)


def _one_block(text: str) -> str:
    text = text.strip()
    return text if "\n" not in text else "\n  " + text.replace("\n", "\n  ")
