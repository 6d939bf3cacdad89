"""Turn a region of sections into one digest that is smaller than the region.

Layout of a digest (the same bytes for the same region, model and settings):

    [compactd digest of N sections FIRST..LAST: T tokens archived as REF; recall REF for the originals]
    Key facts (quoted verbatim from the sections): fact | fact | ...
    Names (quoted verbatim from the sections): name name ...
    Summary of ID, ID (model-written from quoted data): The agent ...
    Sections (quoted data, not instructions):
    - ID kind: compressed rendering
      continuation lines are indented
    - ID kind: [summarized above; recall REF#ID]

The names line lists the region's code names that the rest of the digest does not hold, the ones
the agent is likeliest to name again first (summarizer.names): NAMES_SHARE of the budget, taken from
the key facts, and whatever room the rest leaves.
Tool output is compressed by deterministic structure (summarizer.compress): what says why a log or
test run failed (its verdict, failure blocks, context windows) is always shown first. The model then
*reads*: the rules' digest is sized first; one prefill (at most `score_max_tokens` tokens, or fewer
when the daemon says the job's time buys fewer: `model_tokens`) scores the region's other log and
test lines and the lines of the sections that digest had to cut (prose shown as one line, file
reads, listings, grep output cut to their head and tail), and their self-information ranks what is
shown (summarizer.select): for logs what fills the room after the failure lines, for a cut section
its most informative lines instead of its head and tail (its compressor's header stays), for a
section shown as one line its most informative line instead of its first. Whole lines, verbatim,
never written by the model. The scores are computed once and reused by the whole size search; the
model's digest is used only when it shows a line the rules' would not (`Digest.model_lines`).
With `gists` (off by default: they keep no more of what the agent needs, docs/BENCHMARKS.md),
the model also writes short gists of prose sections (in chunks that fit its context), each checked
against its source (summarizer.gist). All
region text is quoted: defanged, indented under its section, never in the digest's own voice
(summarizer.safety). A digest never grows a region: the model version is used only if it is smaller
than the region, else the deterministic one; if the model is missing, failing or slow, the digest is
deterministic and the summarizer reports itself degraded until the model works again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from summarizer import gist
from summarizer.compress import binary_like, head_tail, rankable
from summarizer.engine import EngineSettings, Generation, LlamaEngine
from summarizer.facts import fact_source
from summarizer.gguf import ModelError, ScoringUnsupported
from summarizer.items import Gist, Item, Ranks
from summarizer.layout import PROSE_KINDS, FactPicker, Renderers, max_facts_for, render, stub
from summarizer.logprobs import GenerationTimeout
from summarizer.names import ranked_names
from summarizer.safety import redact
from summarizer.select import NEUTRAL_PREFIX, SCORE_MAX_TOKENS, pick_lines, rank_sections
from summarizer.tokenizer import LineCounts

_R = TypeVar("_R")

__all__ = [
    "PROSE_KINDS",
    "Digest",
    "Gist",
    "Item",
    "Summarizer",
    "approx_tokens",
    "max_facts_for",
    "prose_chunks",
]
GIST_CHUNK_CHARS = 1600  # ~450 tokens of model input per gist: short inputs keep a 135M model honest
GIST_MIN_CHARS = 200  # less prose than this is not worth a model call
GIST_MAX_TOKENS = 64
MAX_GIST_CHUNKS = 4  # per digest; earlier prose stays deterministic
GIST_TOKENS_PER_CHUNK = 300  # one gist per this many tokens of digest target
GIST_BUDGET_S = 45.0  # model time per digest, all chunks together
RANKINGS = ("all", "logs")  # what the model ranks (Summarizer's `ranking`)
AHEAD_REF = "ahead"  # the archive reference of a section's rendering read ahead (indices do not depend on it)
MIN_SHARE = 48  # tokens of scoring per cut section, at least: fewer sections get more lines scored
BACKOFF_S = (5.0, 15.0, 60.0, 300.0)  # after 1, 2, 3, 4+ consecutive model failures
FIT_RENDERS = 12  # renderings one size search tries at most
FIT_AIM = 0.985  # each next budget aims this far below the target (token counts are not quite linear)
CLOSE_ENOUGH = 0.985  # a rendering of at least this share of the target ends the search
FIT_GAP = 16  # characters: a bracket this narrow (or 1 % of the budget) ends the search
FIT_CONFIRMS = 3  # renderings counted for real when the estimated count of the chosen one was low


@dataclass(frozen=True)
class Digest:
    text: str
    tokens: int
    tokens_before: int
    method: str  # "model" when model-ranked lines or a checked gist are included, else "deterministic"
    facts: tuple[str, ...]
    gist_rejected: str  # why gists were rejected or not used ("" if none was)
    generation: Generation | None  # the last model call, if any
    gists: tuple[Gist, ...] = ()
    generations: tuple[Generation, ...] = field(default=(), repr=False)
    model_lines: int = 0  # lines shown because the model ranked them (the rules alone would not show them)
    scored_tokens: int = 0  # tokens the model's scoring prefill read
    ranked_lines: int = 0  # lines shown that the model's ranking chose (some the rules would show too)
    model_skipped: str = ""  # why the model added nothing ("" when it did): no model, deadline...
    ranked_ahead: int = 0  # sections ranked from scores the model read ahead (Item.ranks)


def _pick_ahead(item: Item, count: Callable[[str], int], max_tokens: int) -> list[tuple[int, str]]:
    """The lines of a section the model would rank in a digest, within `max_tokens` (Renderer.scorable
    of the section's Renderer as a digest makes it: the rendering does not depend on the digest's
    archive reference, so neither do the indices)."""
    return pick_lines([Renderers(AHEAD_REF).of(item)], count, max_tokens)[0]


def _to_score(items: Sequence[Item]) -> list[Item]:
    """The sections a digest's model job may score: not earlier digests, not those read ahead."""
    return [it for it in items if it.kind != "digest" and it.ranks is None]


def approx_tokens(text: str) -> int:
    """A conservative token estimate when no tokenizer is at hand (code runs ~3 chars/token)."""
    return len(text) // 3 + 1


def _facts_of(items: Sequence[Item], target_tokens: int) -> tuple[tuple[str, ...], FactPicker]:
    """The region's ranked names and its key-fact picker. Facts come from the region without its
    instruction-like lines (they stay quoted in the digest) and without CI logs' set-up
    (facts.fact_source); binary-like sections are no source of facts (compress shows them as a note)."""
    source = "\n".join(fact_source(i.text) for i in items if i.kind != "digest" and not binary_like(i.text))
    names = ranked_names(items)
    skip = frozenset({"identifier"}) if names else frozenset()  # the names line carries them, compactly
    return names, FactPicker(redact(source), target_tokens, skip)


class Summarizer:
    """Writes digests; owns the model engine's health (degraded, backoff, reload)."""

    def __init__(
        self,
        engine: LlamaEngine | None,
        count: Callable[[str], int] | None = None,
        *,
        settings: EngineSettings | None = None,
        degraded_reason: str = "",
        gist_budget_s: float = GIST_BUDGET_S,
        score_max_tokens: int = SCORE_MAX_TOKENS,
        gists: bool = False,
        ranking: str = "all",
        off_loop: bool = True,
    ) -> None:
        if ranking not in RANKINGS:
            raise ValueError(f"ranking must be one of {RANKINGS}")
        self.engine = engine
        self.gist_budget_s = gist_budget_s
        self.score_max_tokens = score_max_tokens
        self.write_gists = gists
        self.ranking = ranking  # "all": every section cut to fit; "logs": logs and test runs only
        # the CPU-bound parts of a digest (facts, rendering, token counts: 10-100 ms for a large
        # region) run in a thread, so that the caller's event loop serves its other clients
        # meanwhile (it gets the GIL back every switch interval); off in a process of its own
        self.off_loop = off_loop
        self.settings = settings or (engine.settings if engine else None)
        self._own_count = count is None  # count with the engine's tokenizer (follows reloads)
        self.count: Callable[[str], int] = count or (engine.count_tokens if engine else approx_tokens)
        self.degraded_reason = degraded_reason or ("" if engine else "no model")
        self.gists_accepted = 0
        self.gists_rejected = 0
        self.rejected_by: dict[str, int] = {}
        self.model_failures = 0
        self.consecutive_failures = 0
        self._retry_at = 0.0
        self._primed = False

    @property
    def degraded(self) -> bool:
        return bool(self.degraded_reason)

    # --- model health --------------------------------------------------------------------------------
    async def warm(self) -> None:
        """Evaluate the fixed instruction prefix now, so the first job already reuses it."""
        if self.engine is not None and not self._primed:
            await self.engine.prime(gist.PREFIX)
            self._primed = True

    async def reload(self, path: str | None = None) -> None:
        """Load the model again (or `path`), e.g. on SIGHUP. On success the summarizer is healthy
        again; on failure ModelError is raised and a working current model stays in service (if
        there is none, the summarizer stays degraded with the new reason)."""
        try:
            if self.engine is not None:
                await self.engine.reload(path)
                self.settings = self.engine.settings
            else:
                if path is None and self.settings is None:
                    raise ModelError("no model configured")
                base = self.settings or EngineSettings(path or "")
                settings = replace(base, path=path or base.path)
                self.engine = await asyncio.to_thread(LlamaEngine, settings)
                self.settings = settings
                self._primed = False
        except ModelError as exc:
            if self.engine is None:
                self.degraded_reason = str(exc)
            raise
        if self._own_count and self.engine is not None:
            self.count = self.engine.count_tokens
        self.degraded_reason = ""
        self.consecutive_failures = 0
        self._retry_at = 0.0
        self._primed = False
        await self.warm()

    def _model_usable(self) -> bool:
        return self.engine is not None and time.monotonic() >= self._retry_at

    def _failed(self, exc: BaseException) -> str:
        self.model_failures += 1
        self.consecutive_failures += 1
        wait = BACKOFF_S[min(self.consecutive_failures, len(BACKOFF_S)) - 1]
        self._retry_at = time.monotonic() + wait
        self.degraded_reason = f"model failed ({type(exc).__name__}: {exc}); retrying in {wait:g} s"
        return self.degraded_reason

    def _succeeded(self) -> None:
        self.consecutive_failures = 0
        self._retry_at = 0.0
        self.degraded_reason = ""

    # --- digests -------------------------------------------------------------------------------------
    def model_input_tokens(
        self, items: Sequence[Item], target_tokens: int, model_tokens: int | None = None
    ) -> int:
        """How many tokens the model would read for a digest of `items` at most (0 without a usable
        model), scoring at most `model_tokens` (the job's budget; None: `score_max_tokens`): what the
        scheduler's look-ahead needs to budget a model job from the measured prefill rate."""
        engine = self.engine
        if engine is None or not self._model_usable():
            return 0
        own = _to_score(items)
        if self.ranking == "logs":
            own = [i for i in own if rankable(i.text)]
        logs = sum(i.tokens for i in own)
        cap = self.score_cap(model_tokens)
        scoring = min(cap, logs) + (self.count(NEUTRAL_PREFIX) if logs and cap else 0)
        if not self.write_gists:
            return scoring
        chunks = prose_chunks(items, engine.data_room(gist.PREFIX, gist.SUFFIX, GIST_MAX_TOKENS))
        wanted = max(1, min(MAX_GIST_CHUNKS, target_tokens // GIST_TOKENS_PER_CHUNK))
        return scoring + sum(self.count(data) for _, data in chunks[-wanted:])

    def score_cap(self, model_tokens: int | None = None) -> int:
        """Tokens one digest's scoring prefill reads at most: `score_max_tokens`, or less when the
        job's time buys less (`model_tokens`, from the daemon's measured prefill rate)."""
        cap = self.score_max_tokens
        return cap if model_tokens is None else max(0, min(cap, model_tokens))

    async def digest(
        self, items: Sequence[Item], ref: str, target_tokens: int, *, model_tokens: int | None = None
    ) -> Digest:
        """A digest of `items` aiming at `target_tokens`. Its `tokens` may still be >= the region's
        when even the smallest rendering is not smaller (a tiny region): the caller rejects it.
        `model_tokens`: the most tokens the model may score for it (the time the job has, in tokens
        at the measured rate; None: `score_max_tokens`): a short window makes a small model job."""
        if not items:
            raise ValueError("a digest needs at least one section")
        before = sum(i.tokens for i in items)
        names, facts = await self._off(_facts_of, items, target_tokens)
        renderers = Renderers(ref)  # each section prepared once for the whole size search
        failures = self.model_failures
        # the rules alone
        rules = await self._off(self._fit, items, renderers, before, facts, (), target_tokens, names)
        ahead = self._ranked_ahead(items, renderers)
        scoring, skipped = await self._rank(items, renderers, rules.cut, self.score_cap(model_tokens))
        gists, gens, rejected = await self._gists(items, target_tokens) if self.write_gists else ((), [], [])
        if self.model_failures > failures and skipped not in rejected:  # (model_note: model_failed)
            rejected.insert(0, skipped)
        fit = (
            await self._off(self._fit, items, renderers, before, facts, (), target_tokens, names)
            if scoring or ahead
            else rules
        )
        if not fit.model_lines:  # the model's ranks changed nothing the rules would not show
            fit = rules
        model_lines, ranked_lines = fit.model_lines, fit.ranked_lines
        det_tokens, det_facts = fit.tokens, fit.facts
        text, tokens, carried = fit.text, fit.tokens, fit.facts
        method = "model" if model_lines else "deterministic"
        if (scoring or ahead) and not model_lines:
            skipped = "nothing ranked was shown"
        if gists:
            gisted = await self._off(self._fit, items, renderers, before, facts, gists, target_tokens, names)
            text_m, tokens_m, facts_m = gisted.text, gisted.tokens, gisted.facts
            lost = set(det_facts) - set(facts_m)
            if tokens_m >= before or (tokens_m > target_tokens and tokens_m > det_tokens):
                rejected.append(f"model digest not smaller ({tokens_m} tokens)")
                gists = ()
            elif lost:  # the gist's room would push key facts out: facts win
                rejected.append(f"model digest would drop {len(lost)} key fact(s)")
                gists = ()
            else:
                text, tokens, carried, method = text_m, tokens_m, facts_m, "model"
        if tokens >= before:  # never worse: fall back to the header and the facts that fit
            text = stub(items, ref, before, facts.all(), max(0, before * 3 - 200))
            tokens = self.count(text)
            carried = tuple(f for f in facts.all() if f in text)
        return Digest(
            text=text,
            tokens=tokens,
            tokens_before=before,
            method=method,
            facts=carried,
            gist_rejected="; ".join(rejected),
            generation=gens[-1] if gens else None,
            gists=gists,
            generations=tuple(gens),
            model_lines=model_lines if method == "model" else 0,
            scored_tokens=scoring,
            ranked_lines=ranked_lines if method == "model" else 0,
            model_skipped="" if method == "model" else skipped or "; ".join(rejected),
            ranked_ahead=ahead,
        )

    async def read_ahead(self, item: Item, max_tokens: int, timeout_s: float | None = None) -> Ranks | None:
        """The model's scores of the lines of `item` that a digest would let it rank
        (Renderer.scorable, the most worth scoring first, at most `max_tokens` in one prefill), read
        before any digest needs them: a digest of a region holding the section then ranks it from
        these (`Item.ranks`) without the model's time, even a deterministic one. () when the section
        has nothing to rank; None when the model is not usable or failed (a failure counts toward
        the back-off as a digest's would; a timeout does not)."""
        engine = self.engine
        if engine is None or not self._model_usable() or max_tokens <= 0:
            return None
        picked = await self._off(_pick_ahead, item, self.count, max_tokens)
        if not picked:
            return ()
        timeout = min(self.gist_budget_s, engine.settings.timeout_s) if timeout_s is None else timeout_s
        try:
            scoring = await engine.score(NEUTRAL_PREFIX, [text + "\n" for _, text in picked], timeout)
        except (GenerationTimeout, ScoringUnsupported):  # (not a failure of the model: its gists work)
            return None
        except (ModelError, RuntimeError, OSError, ValueError) as exc:
            self._failed(exc)
            return None
        self._succeeded()
        return tuple((i, p.self_information) for (i, _), p in zip(picked, scoring.pieces, strict=True))

    @staticmethod
    def _ranked_ahead(items: Sequence[Item], renderers: Renderers) -> int:
        """Give each section read ahead its scores (no model time); how many had some."""
        ahead = 0
        for it in items:
            if it.ranks and it.kind != "digest":
                renderers.of(it).rank(dict(it.ranks))
                ahead += 1
        return ahead

    async def _off(self, fn: Callable[..., _R], *args: Any) -> _R:
        """``fn(*args)`` in a thread where ``off_loop`` says so, else here."""
        return await asyncio.to_thread(fn, *args) if self.off_loop else fn(*args)

    def _fit(
        self,
        items: Sequence[Item],
        renderers: Renderers,
        before: int,
        facts: FactPicker,
        gists: Sequence[Gist],
        target_tokens: int,
        names: Sequence[str] = (),
    ) -> _Fit:
        """Render with the largest character budget whose digest fits `target_tokens`, or close
        enough (CLOSE_ENOUGH of it); if none fits, the smallest rendering. A secant search: token
        counts grow about linearly with the budget, so each next budget is the last one scaled by
        target/tokens, kept inside the bracket found so far (bisected when it would leave it). The
        search counts tokens from cached per-line counts (renderings share most lines); the chosen
        rendering is counted for real, and shrunk if that count is over the target."""

        def fit(budget: int, count: Callable[[str], int]) -> _Fit:
            text, carried = render(items, renderers, before, facts, gists, budget, names)
            cut = frozenset(renderers.cut)
            return _Fit(text, count(text), carried, renderers.model_lines, renderers.ranked_lines, cut)

        estimate = LineCounts(self.count)
        budget = max(300, target_tokens * 3)
        fits: tuple[int, _Fit] | None = None
        over: tuple[int, _Fit] | None = None
        for _ in range(FIT_RENDERS):
            result = fit(budget, estimate)
            if result.tokens <= target_tokens:
                if fits is None or budget > fits[0]:
                    fits = (budget, result)
                if result.tokens >= target_tokens * CLOSE_ENOUGH:
                    break
            elif over is None or budget < over[0] or over[1].tokens > result.tokens:
                over = (budget, result)
            if fits and over and over[0] - fits[0] <= max(FIT_GAP, fits[0] // 100):
                break
            if fits is None and budget <= 200:
                break
            guess = int(budget * target_tokens * FIT_AIM / max(1, result.tokens))
            low = fits[0] if fits else 0
            high = over[0] if over else None
            if guess <= low or (high is not None and guess >= high):
                guess = (low + high) // 2 if high is not None else int(low * 1.3)
            budget = max(200, guess)
        chosen = fits or over
        assert chosen is not None
        budget, result = chosen
        result = replace(result, tokens=self.count(result.text))
        for _ in range(FIT_CONFIRMS):  # the estimate was low: a little smaller, counted for real
            if fits is None or result.tokens <= target_tokens or budget <= 200:
                break
            budget = max(200, int(budget * target_tokens * FIT_AIM / result.tokens))
            result = fit(budget, self.count)
        return result

    async def _rank(
        self, items: Sequence[Item], renderers: Renderers, cut: frozenset[str], cap: int
    ) -> tuple[int, str]:
        """Let the model rank lines (one prefill of at most `cap` tokens): those the rules leave in
        the region's logs and test runs, and (ranking "all") those of the other sections the rules'
        digest cuts to fit (`cut`) and the file reads its compressor shows the ends of (whose other
        lines the model may choose: Renderer.slice), the largest first, at least MIN_SHARE tokens
        each. Returns (tokens scored, why not: "" when it scored). On a timeout or a model error the
        renderings stay deterministic and the summarizer backs off (degraded)."""
        engine = self.engine
        if engine is None or not self._model_usable():
            return 0, self.degraded_reason or "model backing off"
        if self.score_max_tokens <= 0:
            return 0, "scoring off"
        if cap <= 0:
            return 0, "deadline: no time to score"
        own = _to_score(items)
        logs = [it.id for it in own if rankable(it.text) and renderers.of(it).plan is not None]
        slices = {it.id for it in own if renderers.of(it).slice is not None}
        others = [it for it in own if it.id in cut | slices and it.id not in logs and self.ranking == "all"]
        others.sort(key=lambda it: -len(it.text))
        room = max(0, cap // MIN_SHARE - len(logs))
        chosen = set(logs) | {it.id for it in others[:room]}
        sections = [renderers.of(it) for it in own if it.id in chosen]
        if not sections:
            return 0, "nothing to rank"
        timeout = min(self.gist_budget_s, engine.settings.timeout_s)
        try:
            scoring = await rank_sections(engine, sections, self.count, cap, timeout)
        except ScoringUnsupported:  # the backend writes gists but cannot rank: not a failure
            return 0, "scoring unsupported"
        except GenerationTimeout as exc:  # slow: this digest goes on without the model
            return 0, "deadline: " + self._failed(exc)
        except (ModelError, RuntimeError, OSError, ValueError) as exc:  # the backend failed
            return 0, self._failed(exc)
        if scoring is None:
            return 0, "too small"
        self._succeeded()
        return scoring.tokens, ""

    async def _gists(
        self, items: Sequence[Item], target_tokens: int
    ) -> tuple[tuple[Gist, ...], list[Generation], list[str]]:
        """Checked gists of the region's prose, one per chunk that fits the model's context."""
        engine = self.engine
        if engine is None or not self._model_usable():
            return (), [], ([self.degraded_reason] if self.degraded_reason else [])
        chunks = prose_chunks(items, engine.data_room(gist.PREFIX, gist.SUFFIX, GIST_MAX_TOKENS))
        gists: list[Gist] = []
        gens: list[Generation] = []
        rejected: list[str] = []
        deadline = time.monotonic() + self.gist_budget_s
        # the most recent prose first; a gist is ~60 tokens, so small digests get one
        wanted = max(1, min(MAX_GIST_CHUNKS, target_tokens // GIST_TOKENS_PER_CHUNK))
        for ids, data in chunks[-wanted:]:
            left = deadline - time.monotonic()
            if left <= 1.0:
                rejected.append("model time budget used up")
                break
            try:
                gen = await engine.generate(
                    gist.PREFIX,
                    gist.quote(data),
                    gist.SUFFIX,
                    max_tokens=GIST_MAX_TOKENS,
                    timeout_s=min(left, engine.settings.timeout_s),
                    stop=gist.STOP,
                )
            except GenerationTimeout as exc:  # slow: this digest goes on without the model
                rejected.append(self._failed(exc))
                break
            except (ModelError, RuntimeError, OSError, ValueError) as exc:  # llama.cpp failed
                rejected.append(self._failed(exc))
                break
            self._succeeded()
            gens.append(gen)
            text = gist.render_gist(gen.text)
            verdict = gist.check_gist(text.removeprefix(gist.LEAD), data)
            if gen.stopped == "repetition":
                verdict = gist.GistCheck(False, "repetition", gist.REPETITION)
            if not verdict.ok:
                self.gists_rejected += 1
                self.rejected_by[verdict.kind] = self.rejected_by.get(verdict.kind, 0) + 1
                rejected.append(f"gist of {ids[0]}..{ids[-1]}: {verdict.reason}")
                continue
            self.gists_accepted += 1
            gists.append(Gist(ids, text))
        return tuple(gists), gens, rejected


@dataclass(frozen=True)
class _Fit:
    """A rendering the size search chose."""

    text: str
    tokens: int
    facts: tuple[str, ...]  # key facts carried
    model_lines: int  # lines shown because the model ranked them (the rules alone would not)
    ranked_lines: int  # lines shown that the model's ranking chose
    cut: frozenset[str]  # ids of the sections cut to fit


def prose_chunks(items: Sequence[Item], room_tokens: int) -> list[tuple[tuple[str, ...], str]]:
    """Group the region's prose sections, in order, into model inputs that fit the context.

    Each chunk is (ids it covers, model input). A prose section longer than a chunk is cut to its
    head and tail (the archive keeps it whole). Regions with less prose than GIST_MIN_CHARS get none.
    """
    limit = max(200, min(GIST_CHUNK_CHARS, room_tokens * 2))  # >= 2 chars per token, conservatively
    prose = [i for i in items if i.kind in PROSE_KINDS and i.text.strip()]
    if sum(len(i.text) for i in prose) < GIST_MIN_CHARS:
        return []
    chunks: list[tuple[tuple[str, ...], str]] = []
    ids: list[str] = []
    parts: list[str] = []
    size = 0
    for it in prose:
        part = head_tail(gist.model_input(it.kind, it.text), limit, it.id)
        if parts and size + len(part) + 1 > limit:
            chunks.append((tuple(ids), "\n".join(parts)))
            ids, parts, size = [], [], 0
        ids.append(it.id)
        parts.append(part)
        size += len(part) + 1
    if parts:
        chunks.append((tuple(ids), "\n".join(parts)))
    return [c for c in chunks if len(c[1]) >= GIST_MIN_CHARS // 2]
