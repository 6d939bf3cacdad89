"""Model-scored selection: the model ranks a region's lines, selection keeps whole lines verbatim.

The model never writes here; it only reads. One prefill gives every token's log-probability
(summarizer.logprobs), and each line is scored by

* self-information (Selective Context, arXiv 2304.12102; LLMLingua, arXiv 2310.05736): the mean
  surprisal ``-log p`` of the line's tokens given the text before it. Boilerplate the model has seen
  a thousand times (progress bars, "Downloading ...", the same line again) scores low; a line it could
  not predict scores high;
* goal gain (LongLLMLingua, arXiv 2310.06839): how much more likely the line becomes when the
  agent's goal is read first, ``mean(log p(line | goal, before) - log p(line | before))``.

Selection keeps the best lines within a token target and returns them in their original order,
each a verbatim substring of a region line (a leading log timestamp may be dropped: it is noise to
the ranking and to the reader). It can never put a token into its output that the region does not
contain. ``must`` lines (chosen by deterministic structure: failure blocks, anchors) go first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from summarizer.compress.clean import stamp_free
from summarizer.logprobs import PieceScore, Scoring

# Both prefixes open a chat turn: the model's BOS token (<|im_start|>) comes first, which also lets
# llama-cpp-python's server align echoed prompt log-probabilities (it drops a leading BOS only).
NEUTRAL_PREFIX = "<|im_start|>user\nLog excerpt:\n"
GOAL_PREFIX = "<|im_start|>user\nTask: {goal}\nLog excerpt:\n"
SCORE_TIMEOUT_S = 600.0


class Scorer(Protocol):
    """What selection needs from a backend (LlamaEngine, summarizer.remote.RemoteEngine)."""

    async def score(self, prefix: str, pieces: Sequence[str], timeout_s: float | None = None) -> Scoring: ...


@dataclass(frozen=True)
class LineScores:
    texts: tuple[str, ...]  # the lines as scored and as selected (leading timestamp dropped)
    tokens: tuple[int, ...]  # model tokens of each text (+1 for its newline)
    self_information: tuple[float, ...]
    gain: tuple[float, ...] | None  # None without a goal
    scored_tokens: int
    seconds: float


def line_text(line: str) -> str:
    """The part of a line that is scored and quoted: the line without its leading timestamps (as CI
    runners print them, GitHub Actions: "2026-04-23T04:08:22.8180462Z "; compress.clean.stamp_free)."""
    return stamp_free(line)


def goal_prefix(goal: str) -> str:
    """The conditional prefix; the goal is text, it cannot open a chat turn."""
    clean = " ".join(goal.replace("<|", "< |").split())[:400]
    return GOAL_PREFIX.format(goal=clean)


async def score_lines(
    scorer: Scorer, lines: Sequence[str], goal: str = "", timeout_s: float = SCORE_TIMEOUT_S
) -> LineScores:
    """Score every line: one prefill for self-information, one more with the goal read first."""
    texts = tuple(line_text(ln) for ln in lines)
    pieces = [t + "\n" for t in texts]
    plain = await scorer.score(NEUTRAL_PREFIX, pieces, timeout_s)
    info = tuple(p.self_information for p in plain.pieces)
    gain: tuple[float, ...] | None = None
    seconds, scored = plain.seconds, plain.tokens
    if goal.strip():
        cond = await scorer.score(goal_prefix(goal), pieces, timeout_s)
        gain = tuple(_gain(c, p) for c, p in zip(cond.pieces, plain.pieces, strict=True))
        seconds += cond.seconds
        scored += cond.tokens
    tokens = tuple(p.tokens for p in plain.pieces)
    return LineScores(texts, tokens, info, gain, scored, seconds)


def _gain(cond: PieceScore, plain: PieceScore) -> float:
    return (cond.logprob - plain.logprob) / plain.tokens if plain.tokens else 0.0


def select(
    texts: Sequence[str],
    tokens: Sequence[int],
    scores: Sequence[float],
    budget: int,
    must: Sequence[int] = (),
) -> list[int]:
    """Indices of the lines to keep, in original order: ``must`` first (in its order, while they fit),
    then the highest scores; a line that does not fit is skipped for smaller ones. Blank lines and
    repeats of a kept line are never chosen (they carry nothing new)."""
    chosen: set[int] = set()
    seen: set[str] = set()
    used = 0
    order = [*must, *sorted(range(len(texts)), key=lambda i: (-scores[i], i))]
    for i in order:
        text = texts[i].strip()
        if i in chosen or not text or text in seen or used + tokens[i] > budget:
            continue
        chosen.add(i)
        seen.add(text)
        used += tokens[i]
    return sorted(chosen)


def render(texts: Sequence[str], kept: Sequence[int]) -> str:
    """The kept lines, in order, one per line."""
    return "\n".join(texts[i] for i in kept)


def verbatim(lines: Sequence[str], texts: Sequence[str], kept: Sequence[int]) -> bool:
    """True when every kept text is a substring of its own region line (the selection guarantee)."""
    return all(0 <= i < len(lines) and texts[i] in lines[i] for i in kept)


# --- ranking the lines of a digest's logs and test runs (summarizer.digest) ----------------------------

SCORE_MAX_TOKENS = 2048  # default cap on the tokens one digest's scoring prefill reads ([model] key)
_EXAMINED_MAX = 20_000  # candidate lines looked at per section, at most (bounds the work on huge logs)


class Rankable(Protocol):
    """A section's prepared rendering whose lines the model may rank (summarizer.compress.Renderer)."""

    def scorable(self) -> list[tuple[int, str]]: ...

    def rank(self, scores: Mapping[int, float]) -> None: ...


def pick_lines(
    sections: Sequence[Rankable], count: Callable[[str], int], max_tokens: int
) -> list[list[tuple[int, str]]]:
    """Per section, the (index, scored text) of the lines to score, in their order, within
    `max_tokens` in all: each section gets an even share of what the earlier ones left, and takes its
    candidates most-worth-scoring first (summarizer.compress.select.candidates)."""
    picked: list[list[tuple[int, str]]] = []
    left = max(0, max_tokens)
    for k, section in enumerate(sections):
        share = left // (len(sections) - k)
        mine: list[tuple[int, str]] = []
        used = 0
        for examined, (i, line) in enumerate(section.scorable()):
            if share - used < 4 or examined >= _EXAMINED_MAX:
                break
            text = line_text(line)
            n = count(text) + 1
            if used + n <= share:
                mine.append((i, text))
                used += n
        left -= used
        picked.append(sorted(mine))
    return picked


async def rank_sections(
    scorer: Scorer,
    sections: Sequence[Rankable],
    count: Callable[[str], int],
    max_tokens: int,
    timeout_s: float,
) -> Scoring | None:
    """Score the picked lines of all `sections` in one prefill and give each section its lines'
    self-information (Rankable.rank). None when there is nothing to score. Raises what the scorer
    raises (timeout, model error): the caller's digest then stays deterministic."""
    picked = pick_lines(sections, count, max_tokens)
    pieces = [text + "\n" for mine in picked for _, text in mine]
    if not pieces:
        return None
    scoring = await scorer.score(NEUTRAL_PREFIX, pieces, timeout_s)
    k = 0
    for section, mine in zip(sections, picked, strict=True):
        scores = {i: scoring.pieces[k + j].self_information for j, (i, _) in enumerate(mine)}
        k += len(mine)
        if scores:
            section.rank(scores)
    return scoring
