"""Model-scored selection with the real model: one prefill per pass, windows, and the guarantee that
every selected token is a verbatim quote of its region."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from summarizer.engine import EngineSettings, LlamaEngine
from summarizer.select import NEUTRAL_PREFIX, line_text, render, score_lines, select, verbatim
from tests.fixtures.pagemap import resident
from watcher.eval.bench.cilog import normalize
from watcher.eval.bench.select import load_cases, rankings

CASES = Path(__file__).resolve().parents[3] / "shared" / "cilogbench"


@pytest.fixture(scope="module")
def engine(model_path: str) -> Iterator[LlamaEngine]:
    eng = LlamaEngine(EngineSettings(model_path, n_ctx=256, weights="q4_0"))  # small: several windows
    yield eng
    eng.close()


def test_line_text_drops_only_a_leading_timestamp() -> None:
    assert (
        line_text("\ufeff2026-04-23T04:08:22.8180462Z ##[error]Process exited") == "##[error]Process exited"
    )
    assert line_text("2024-01-02 10:11:12,345+02:00 ERROR x") == "ERROR x"
    assert line_text("at 2026-04-23T04:08:22Z the job failed") == "at 2026-04-23T04:08:22Z the job failed"


def test_select_keeps_must_lines_first_skips_repeats_and_fits_the_budget() -> None:
    texts = ["a", "b", "a", "", "c", "d"]
    tokens = [2, 2, 2, 1, 5, 2]
    scores = [1.0, 3.0, 9.0, 99.0, 8.0, 0.0]
    assert select(texts, tokens, scores, budget=6, must=[5]) == [1, 2, 5]  # d, then a (9), b (3); c too big
    assert select(texts, tokens, scores, budget=0) == []


async def test_scores_are_log_probabilities_of_each_line_across_windows(engine: LlamaEngine) -> None:
    lines = [f"step {i}: compiled module_{i % 7}.rs in {i * 13 % 97} ms" for i in range(60)]
    pieces = [ln + "\n" for ln in lines]
    first = await engine.score(NEUTRAL_PREFIX, pieces)
    again = await engine.score(NEUTRAL_PREFIX, pieces)  # the prefix's KV state reused
    assert first.tokens > 3 * engine.n_ctx  # several windows
    assert [p.tokens for p in first.pieces] == [engine.count_tokens(p) for p in pieces]
    assert all(p.logprob <= 0 and math.isfinite(p.logprob) for p in first.pieces)
    assert [round(p.logprob, 4) for p in again.pieces] == [round(p.logprob, 4) for p in first.pieces]
    # a line repeated verbatim is far more predictable the second time
    rep = await engine.score(NEUTRAL_PREFIX, ["error: linker `cc` not found\n"] * 2)
    assert rep.pieces[1].self_information < rep.pieces[0].self_information / 2


async def test_score_rows_bounds_the_positions_read_back_per_decode(
    engine: LlamaEngine, model_path: str
) -> None:
    """[model] score_rows: each scoring decode reads back at most that many positions' logits
    (llama.cpp holds 2 x rows x vocabulary floats); the log-probabilities are the same but for
    the numerics of another batch size."""
    pieces = [f"step {i}: compiled module_{i % 7}.rs in {i * 13 % 97} ms\n" for i in range(40)]
    small = LlamaEngine(EngineSettings(model_path, n_ctx=256, weights="q4_0", score_rows=16))
    batches: list[int] = []
    decode = small._decode

    def spy(batch: list[int], logits_all: bool) -> None:
        if logits_all:
            batches.append(len(batch))
        decode(batch, logits_all)

    small._decode = spy  # type: ignore[method-assign]
    try:
        few = await small.score(NEUTRAL_PREFIX, pieces)
    finally:
        small.close()
    wide = await engine.score(NEUTRAL_PREFIX, pieces)
    assert batches and max(batches) == 16 and sum(batches) >= few.tokens
    assert [p.tokens for p in few.pieces] == [p.tokens for p in wide.pieces]
    for a, b in zip(few.pieces, wide.pieces, strict=True):
        assert math.isclose(a.logprob, b.logprob, rel_tol=0.1, abs_tol=0.1)  # batch-size numerics: <5 % seen


async def test_scoring_hands_back_the_pages_of_the_logits_it_read(engine: LlamaEngine) -> None:
    """llama.cpp keeps score_rows x vocabulary floats of logits after a scoring; their pages go
    back to the kernel (summarizer.pages), and the next scoring reads the same log-probabilities."""
    pieces = [f"step {i}: compiled module_{i % 7}.rs in {i * 13 % 97} ms\n" for i in range(40)]
    first = await engine.score(NEUTRAL_PREFIX, pieces)
    address = ctypes.cast(engine._llm._ctx.get_logits(), ctypes.c_void_p).value or 0
    size = engine.settings.score_rows * engine._llm.n_vocab() * 4
    assert address and resident(address, size) <= 2  # a partial page at each end, at most
    again = await engine.score(NEUTRAL_PREFIX, pieces)
    assert [round(p.logprob, 4) for p in again.pieces] == [round(p.logprob, 4) for p in first.pieces]
    assert (await engine.generate("Say:", " ok", "\n", max_tokens=4)) is not None  # a decode after it


async def test_every_selected_token_is_a_verbatim_quote_of_its_region(engine: LlamaEngine) -> None:
    for case in load_cases(CASES):
        if case.split != "stress" or len(case.lines) > 100:  # the three small stress logs
            continue
        sc = await score_lines(engine, case.lines, "find why the CI job failed")
        assert sc.gain is not None and any(g != 0 for g in sc.gain)
        region = normalize("\n".join(case.lines))
        for fraction in (1 / 8, 1 / 3):
            budget = int(sum(sc.tokens) * fraction)
            for name, (scores, must) in rankings(sc).items():
                kept = select(sc.texts, sc.tokens, scores, budget, must)
                assert kept and verbatim(case.lines, sc.texts, kept), (case.name, name)
                assert sum(sc.tokens[i] for i in kept) <= budget
                out = render(sc.texts, kept)
                assert all(line in region for line in out.split("\n")), (case.name, name)
                vocabulary = set(region.split())
                assert set(out.split()) <= vocabulary  # not one word the region does not have


def test_token_logprobs_match_a_float64_log_softmax() -> None:
    import numpy as np

    from summarizer.logprobs import token_logprobs

    logits = np.random.default_rng(1).standard_normal((70, 1000), dtype=np.float32) * 8
    targets = np.arange(70) * 13
    exact = logits[np.arange(70), targets] - np.log(np.exp(logits.astype(np.float64)).sum(axis=1))
    assert np.abs(token_logprobs(logits, targets) - exact).max() < 1e-5
