"""A model job's expected time comes from measurement: the warm-up prefill of the real model, then
the engine's own counters over real jobs; no constant of some machine."""

from __future__ import annotations

import pytest

from summarizer.digest import Item, Summarizer
from summarizer.engine import EngineSettings, LlamaEngine
from watcher.serve.modelcost import MIN_MODEL_TOKENS, ModelCost, engine_totals, warm_up

pytestmark = pytest.mark.serial  # races the machine's own speed (tests/conftest.py)


def test_no_estimate_before_a_measurement() -> None:
    cost = ModelCost()
    assert cost.expect() is None and cost.expect(1000) is None
    assert cost.stats()["expected_job_s"] is None


def test_expected_time_is_input_over_rate_plus_the_measured_overhead() -> None:
    cost = ModelCost()
    cost.warmed(300, 1.5, (300.0, 1.5))  # 200 tokens/s
    assert cost.expect(1000) == pytest.approx(5.0)
    assert cost.expect() == pytest.approx(1.5)  # before any job: the warm-up's input
    # a job read 1000 tokens; the engine prefilled them in 4 s (250 tokens/s) and the job took 6 s
    cost.record(1000, 6.0, (1300.0, 5.5))
    assert cost.rate == pytest.approx(0.7 * 200 + 0.3 * 250)
    assert cost.overhead_s == pytest.approx(6.0 - 1000 / cost.rate)
    assert cost.expect(2000) > cost.expect(1000) > cost.overhead_s
    # the machine got busier: the rate follows the engine's counters down, the estimate up
    before = cost.expect(1000)
    for k in range(5):
        cost.record(1000, 12.0, (2300.0 + 1000 * k, 15.5 + 10 * k))
    assert cost.rate < 150 and cost.expect(1000) > before * 1.5
    assert cost.jobs == 6


def test_a_short_window_buys_a_smaller_job_not_none() -> None:
    cost = ModelCost()
    assert cost.tokens_in(10.0) is None  # not measured: no budget
    cost.warmed(300, 1.5, (300.0, 1.5))  # 200 tokens/s
    cost.record(1000, 6.0, (1300.0, 6.5))  # 200 tokens/s, 1 s of overhead
    assert cost.rate == pytest.approx(200) and cost.overhead_s == pytest.approx(1.0)
    assert cost.tokens_in(3.0) == 400 and cost.tokens_in(0.5) == 0
    # a job reading at most n scored tokens + a 10-token prefix: the prefix comes out of the budget
    assert cost.smaller_job(3.0, lambda n: min(n, 2048) + 10) == (390, 400)
    assert cost.smaller_job(100.0, lambda n: min(n, 2048) + 10) == (19800, 2058)  # reads its own cap
    # too short a window: not even MIN_MODEL_TOKENS to score
    too_short = 1.0 + (MIN_MODEL_TOKENS + 9) / 200
    assert cost.smaller_job(too_short, lambda n: min(n, 2048) + 10) is None
    # gists (when on) are not capped: a budget they do not fit makes no job
    assert cost.smaller_job(3.0, lambda n: min(n, 2048) + 10 + 450) is None


def test_engine_totals_add_prefill_and_scoring() -> None:
    stats = {"prompt_tokens": 1500.0, "reused_prompt_tokens": 500.0, "prefill_tps": 250.0}
    assert engine_totals(stats) == (1000.0, 4.0)
    both = stats | {"scored_tokens": 600.0, "score_tps": 300.0}
    assert engine_totals(both) == (1600.0, 6.0)
    assert engine_totals({}) == (0.0, 0.0)


async def test_warm_up_measures_the_real_models_prefill_rate(model_path: str) -> None:
    engine = LlamaEngine(EngineSettings(model_path))
    try:
        summ = Summarizer(engine)
        cost = ModelCost()
        await warm_up(summ, cost)
        assert cost.measured and cost.warmup["tokens"] > 100 and cost.warmup["seconds"] > 0
        assert cost.rate == pytest.approx(cost.warmup["tokens"] / cost.warmup["seconds"], rel=0.01)
        # a real digest's input, priced: more prose to read costs more
        prose = "The agent read the failing test and decided to change the parser. " * 30
        items = [Item(f"s{i}", "assistant", prose, 400) for i in range(4)]
        small, large = summ.model_input_tokens(items[:1], 300), summ.model_input_tokens(items, 1200)
        assert 0 < small < large
        small_s, large_s = cost.expect(small), cost.expect(large)
        assert small_s is not None and large_s is not None and small_s < large_s
    finally:
        engine.close()


async def test_warm_up_without_a_model_measures_nothing() -> None:
    cost = ModelCost()
    await warm_up(Summarizer(None), cost)
    assert not cost.measured
