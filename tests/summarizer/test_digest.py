"""Digests of real trajectory regions: smaller, facts kept verbatim, stable bytes, degraded fallbacks."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from summarizer.compress import rankable
from summarizer.digest import (
    GIST_CHUNK_CHARS,
    Item,
    Summarizer,
    approx_tokens,
    prose_chunks,
)
from summarizer.engine import EngineSettings, LlamaEngine
from summarizer.gguf import ModelError
from summarizer.select import NEUTRAL_PREFIX
from summarizer.tokenizer import LineCounts, load_counter
from watcher.eval.bench.summarizer import Region, cut_regions
from watcher.eval.canaries import load_canaries, plant
from watcher.eval.trajectories import load_many
from watcher.planning.planner import digest_target


@pytest.fixture(scope="module")
def count(model_path: str) -> object:
    return load_counter(model_path)


SUFFIXES = (".json", ".jsonl", ".traj")


@functools.cache
def _regions(trajectories: Path, model_path: str, n: int, seed: int) -> list[Region]:
    paths = sorted(
        p for p in trajectories.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".traj")
    )
    return cut_regions(load_many(paths), n, seed, load_counter(model_path))


def target(region: Region) -> int:
    return digest_target(sum(i.tokens for i in region.items), 128_000)


@pytest.fixture(scope="module")
def engine(model_path: str) -> Iterator[LlamaEngine]:
    eng = LlamaEngine(EngineSettings(model_path, flash_attn=True))
    yield eng
    eng.close()


async def test_deterministic_digests_are_small_keep_planted_facts_and_are_stable(
    trajectories: Path, model_path: str
) -> None:
    regions = _regions(trajectories, model_path, 16, 11)
    counter = load_counter(model_path)
    summ = Summarizer(None, count=counter)
    assert summ.degraded and summ.degraded_reason == "no model"
    planted = found = before = after = 0
    for i, r in enumerate(regions):
        d = await summ.digest(r.items, f"a{i}", target(r))
        assert d.method == "deterministic"
        assert d.tokens == counter(d.text)
        assert d.tokens < d.tokens_before and d.tokens <= target(r), (r.name, d.tokens, target(r))
        assert d.text.startswith(f"[compactd digest of {len(r.items)} sections ")
        assert all(f in d.text for f in d.facts)
        planted += len(r.planted)
        found += sum(1 for f in r.planted if f in d.text)
        before, after = before + d.tokens_before, after + d.tokens
        again = await summ.digest(r.items, f"a{i}", target(r))
        assert again.text == d.text  # stable bytes
    assert found / planted >= 0.95  # fact_retention
    assert before / after >= 4  # compression_ratio


async def test_an_earlier_digest_is_kept_verbatim_never_resummarized() -> None:
    old = "[compactd digest of 3 sections s1..s3: 900 tokens archived as a1; recall a1 for the originals]"
    items = [
        Item("d1", "digest", old, 30),
        Item("s4", "assistant", "I reran the tests in tests/test_io.py; 41 passed. " * 20, 300),
        Item("s5", "tool_result", "ok\n" * 400, 400),
    ]
    d = await Summarizer(None).digest(items, "a2", 200)
    assert f"- d1 digest: {old}" in d.text
    assert prose_chunks(items, 10_000) and all("d1" not in ids for ids, _ in prose_chunks(items, 10_000))


def test_long_prose_is_chunked_to_fit_the_model_context() -> None:
    items = [
        Item(f"s{i}", "assistant", f"Step {i}: I edited module_{i}.py and reran the tests. " * 12, 200)
        for i in range(12)
    ]
    for room in (10_000, 300):
        chunks = prose_chunks(items, room)
        assert len(chunks) > 1
        covered = [i for ids, _ in chunks for i in ids]
        assert covered == [it.id for it in items]  # every prose section once, in order
        assert all(len(data) <= min(GIST_CHUNK_CHARS, room * 2) for _, data in chunks)


@pytest.mark.slow
async def test_model_digest_is_smaller_keeps_facts_and_has_stable_bytes(
    trajectories: Path, model_path: str, engine: LlamaEngine
) -> None:
    region = next(r for r in _regions(trajectories, model_path, 16, 11) if prose_chunks(r.items, 10_000))
    summ = Summarizer(engine, gists=True)
    await summ.warm()
    d = await summ.digest(region.items, "a1", target(region))
    assert d.generations, "a gist was attempted"
    assert d.tokens < d.tokens_before
    det = await Summarizer(None, count=engine.count_tokens).digest(region.items, "a1", target(region))
    assert set(det.facts) <= set(d.facts)  # the model never costs a key fact
    assert not summ.degraded
    again = await summ.digest(region.items, "a1", target(region))
    other = LlamaEngine(EngineSettings(model_path, flash_attn=True))
    try:
        fresh = await Summarizer(other, gists=True).digest(region.items, "a1", target(region))
    finally:
        other.close()
    assert d.text == again.text == fresh.text  # same bytes: warm engine, and another engine


async def test_corrupt_model_degrades_and_reload_recovers(tmp_path: Path, model_path: str) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUF" + bytes(range(256)) * 16)
    summ = Summarizer(None, settings=EngineSettings(str(bad)), degraded_reason="model unavailable")
    with pytest.raises(ModelError, match="could not be loaded"):
        await summ.reload()
    assert summ.degraded and str(bad) in summ.degraded_reason
    items = [
        Item("s1", "assistant", "I fixed tests/test_io.py. " * 40, 250),
        Item("s2", "tool_result", "x\n" * 600, 400),
    ]
    d = await summ.digest(items, "a1", 100)
    assert d.method == "deterministic" and d.tokens < d.tokens_before
    assert summ.count is approx_tokens

    await summ.reload(model_path)
    assert not summ.degraded and summ.engine is not None
    assert summ.count == summ.engine.count_tokens
    summ.engine.close()


async def test_timeout_falls_back_backs_off_and_recovers_on_reload(model_path: str) -> None:
    eng = LlamaEngine(EngineSettings(model_path, timeout_s=0.0))
    try:
        summ = Summarizer(eng)
        items = [Item("s1", "assistant", "I ran the tests in tests/test_io.py and 3 failed. " * 12, 150)]
        items.append(Item("s2", "tool_result", "FAILED tests/test_io.py::test_crlf\n" * 40, 400))
        d = await summ.digest(items, "a1", 120)
        assert d.method == "deterministic" and d.tokens < d.tokens_before
        assert summ.degraded and "GenerationTimeout" in summ.degraded_reason
        assert eng.timeouts == 1
        await summ.digest(items, "a2", 120)  # backing off: the model is not tried again yet
        assert eng.timeouts == 1 and summ.consecutive_failures == 1
        await summ.reload()
        assert not summ.degraded and summ.consecutive_failures == 0
    finally:
        eng.close()


async def test_the_size_search_counts_lines_once_and_confirms_the_chosen_digest(
    trajectories: Path, model_path: str
) -> None:
    """The search estimates token counts from cached per-line counts (exact for this tokenizer on
    these digests); the digest it returns is counted for real and fits its target, also with a
    counter for which the estimate is always low (the whole counts more than its lines)."""
    counter = load_counter(model_path)
    for i, r in enumerate(_regions(trajectories, model_path, 8, 5)):
        d = await Summarizer(None, count=counter).digest(r.items, f"a{i}", target(r))
        assert d.tokens == counter(d.text) == LineCounts(counter)(d.text) <= target(r)

    def superadditive(text: str) -> int:  # a counter that is not a sum over lines
        return len(text) // 4 + len(text) ** 2 // 40_000

    for i, r in enumerate(_regions(trajectories, model_path, 8, 5)):
        d = await Summarizer(None, count=superadditive).digest(r.items, f"a{i}", target(r))
        assert LineCounts(superadditive)(d.text) < d.tokens == superadditive(d.text)
        assert d.tokens <= target(r) or d.tokens >= d.tokens_before, (r.name, d.tokens, target(r))


async def test_a_region_too_small_to_shrink_is_reported_not_grown_silently() -> None:
    items = [Item("s1", "user", "ok", 1), Item("s2", "assistant", "done", 1)]
    d = await Summarizer(None).digest(items, "a1", 48)
    assert d.tokens >= d.tokens_before  # the caller (watcher.serve.compactor) drops such a digest
    assert d.method == "deterministic" and d.text.startswith("[compactd digest of 2 sections")
    with pytest.raises(ValueError, match="at least one section"):
        await Summarizer(None).digest([], "a1", 48)


async def test_an_agents_musings_do_not_crowd_stated_facts_out_of_a_small_digest(
    trajectories: Path, model_path: str
) -> None:
    """Found live (replay of pytest-6197, canaries seed 1): a long "Maybe ...? ..." line, ranked
    first, took the stated facts' share of a 327-token digest of s00070..s00079, and the two
    canaries planted in its tool output were lost."""
    count = load_counter(model_path)
    traj = load_many([trajectories / "mini-swe-agent" / "pytest-dev__pytest-6197.traj.json"], count=count)[0]
    sentences = load_canaries(Path(__file__).parents[2] / "bench" / "canaries.txt")
    played, canaries = plant(traj, sentences, 1, count)
    ids = [f"s{n:05d}" for n in range(70, 80)]
    region = [s for s in played.sections if s.id in ids]
    planted = [c.text for c in canaries if c.section in ids]
    assert len(region) == 10 and len(planted) == 2
    items = [Item(s.id, s.kind, s.text, s.tokens) for s in region]
    d = await Summarizer(None, count=count).digest(items, "a52", 327)
    assert d.tokens <= 327
    assert all(p in d.text for p in planted), d.text


async def test_model_input_tokens_counts_what_the_model_reads(
    trajectories: Path, model_path: str, engine: LlamaEngine
) -> None:
    region = next(r for r in _regions(trajectories, model_path, 16, 11) if prose_chunks(r.items, 10_000))
    t = target(region)
    summ = Summarizer(engine, gists=True)
    n = summ.model_input_tokens(region.items, t)
    assert 0 < n <= sum(i.tokens for i in region.items) + 64 + summ.score_max_tokens
    assert Summarizer(None, count=engine.count_tokens).model_input_tokens(region.items, t) == 0
    prefix = engine.count_tokens(NEUTRAL_PREFIX)
    own = sum(i.tokens for i in region.items if i.kind != "digest")
    scoring = min(summ.score_max_tokens, own) + prefix  # every section may be cut, so scored
    no_gists = Summarizer(engine)  # the default: no gists
    assert no_gists.model_input_tokens(region.items, t) == scoring
    assert n > scoring  # gists read the prose too
    logs = sum(i.tokens for i in region.items if rankable(i.text))
    logs_only = Summarizer(engine, ranking="logs")
    assert logs_only.model_input_tokens(region.items, t) == min(summ.score_max_tokens, logs) + (
        prefix if logs else 0
    )
    # the job's budget (the daemon's: the tokens its time buys) caps the scoring prefill
    assert no_gists.model_input_tokens(region.items, t, model_tokens=100) == min(100, own) + prefix
    assert no_gists.model_input_tokens(region.items, t, model_tokens=0) == 0
    log = "\n".join(f"2026-01-01T00:00:{k % 60:02d}Z step {k}: compiling module_{k}" for k in range(400))
    log += "\nerror: could not compile module_7\n##[error]Process completed with exit code 1."
    big = Item("s9", "tool_result", log, engine.count_tokens(log))
    assert rankable(big.text) and big.tokens > summ.score_max_tokens
    capped = summ.score_max_tokens + engine.count_tokens(NEUTRAL_PREFIX)
    assert no_gists.model_input_tokens([big], 500) == capped  # the scoring prefill, capped


async def test_the_model_ranks_what_cut_sections_show_within_the_jobs_token_budget(
    trajectories: Path, model_path: str, engine: LlamaEngine
) -> None:
    """Prose and tool outputs a digest must cut (no log in them): the model's ranking chooses what
    they show, within the job's `model_tokens`; only quotes; `model_tokens=0` or ranking logs only
    leaves the rules' digest, byte for byte."""
    from summarizer.frame import unquoted

    count = engine.count_tokens
    regions = _regions(trajectories, model_path, 16, 11)
    regions = [r for r in regions if not any(rankable(i.text) for i in r.items)]
    cases = []
    for region in regions:  # regions whose sections the rules' digest shows (not only lists)
        t = sum(i.tokens for i in region.items) // 2
        det = await Summarizer(None, count=count).digest(region.items, "a1", t)
        if " not shown (" not in det.text:
            cases.append((region, t, det))
    assert len(cases) >= 6
    shown = scored = 0
    for region, t, det in cases[:6]:
        summ = Summarizer(engine, count=count)
        d = await summ.digest(region.items, "a1", t, model_tokens=160)
        assert d.scored_tokens <= 160 + count(NEUTRAL_PREFIX)
        assert d.scored_tokens or d.model_skipped == "nothing to rank"  # nothing cut: nothing to rank
        scored += d.scored_tokens > 0
        assert unquoted(d.text, region.items) == [] and d.tokens < d.tokens_before
        assert set(det.facts) <= set(d.facts) or d.tokens <= t  # key facts are the rules' to keep
        if d.method == "model":
            shown += 1
            assert d.model_lines >= 1 and d.ranked_lines >= d.model_lines and d.text != det.text
        else:
            assert d.text == det.text and d.model_skipped in ("nothing ranked was shown", "nothing to rank")
        none = await summ.digest(region.items, "a1", t, model_tokens=0)
        assert none.text == det.text and none.scored_tokens == 0 and none.method == "deterministic"
        assert none.model_skipped.startswith("deadline")
        logs = await Summarizer(engine, count=count, ranking="logs").digest(region.items, "a1", t)
        assert logs.text == det.text and logs.model_skipped == "nothing to rank"
    assert scored >= 3 and shown >= 2  # the model's choice reached digests that cut sections


async def test_lines_read_ahead_rank_a_digest_without_the_models_time(
    trajectories: Path, model_path: str, engine: LlamaEngine
) -> None:
    """The model's scores of a section's lines, read ahead of any digest (`Summarizer.read_ahead`),
    rank what the section shows in a digest of a region holding it: a digest with no model at all (the
    worker's) shows the model's choice of lines, only quotes, and the model's digest of the same region
    reads nothing for those sections. A section too small to rank reads as () and costs no prefill."""
    from dataclasses import replace

    from summarizer.frame import unquoted

    count = engine.count_tokens
    summ = Summarizer(engine, count=count)
    regions = _regions(trajectories, model_path, 16, 11)
    tried = chosen = 0
    for region in regions:
        t = sum(i.tokens for i in region.items) // 2
        det = await Summarizer(None, count=count).digest(region.items, "a1", t)
        if " not shown (" in det.text:
            continue  # only listed: nothing a ranking could choose
        before = engine.scored_tokens_total
        ahead = [replace(it, ranks=await summ.read_ahead(it, 96)) for it in region.items]
        assert all(it.ranks is not None for it in ahead)
        for it in ahead:  # each score is of a line the section's rendering could show
            assert all(isinstance(i, int) and isinstance(s, float) for i, s in it.ranks or ())
        read = engine.scored_tokens_total - before
        assert read <= 96 * len(ahead) + count(NEUTRAL_PREFIX) * len(ahead)
        worker = await Summarizer(None, count=count).digest(ahead, "a1", t)
        assert unquoted(worker.text, region.items) == [] and worker.tokens < worker.tokens_before
        assert worker.ranked_ahead == sum(1 for it in ahead if it.ranks and it.kind != "digest")
        if worker.method == "model":
            chosen += 1
            assert worker.model_lines >= 1 and worker.text != det.text and worker.model_skipped == ""
        else:
            assert worker.text == det.text
        assert summ.model_input_tokens(ahead, t) == 0  # read ahead: nothing left for a model job
        again = await summ.digest(ahead, "a1", t)
        assert again.scored_tokens == 0 and again.text == worker.text
        tried += 1
        if tried == 6:
            break
    assert tried == 6 and chosen >= 2, (tried, chosen)
    small = Item("s1", "assistant", "ok, done.", 3)
    before = engine.scored_tokens_total
    assert await summ.read_ahead(small, 96) == () and engine.scored_tokens_total == before
    assert await Summarizer(None, count=count).read_ahead(small, 96) is None  # no model
