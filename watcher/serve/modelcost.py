"""What a model job costs, from measurement: the budget of the look-ahead and the degrader.

A model job reads tokens (the prefill of the lines it scores, the prose it gists) and may write a
few (a gist). Its expected time on this machine, at this load, is

    input tokens / prefill rate  +  overhead

* the **prefill rate** (tokens/s) is measured once when the model loads (:func:`warm_up`: one timed
  prefill of a fixed text, :data:`WARMUP_TEXT`), then follows the engine's own counters over real
  jobs (the tokens it prefilled and scored and the seconds it took, an exponentially weighted mean
  per job), so it follows the load of the machine;
* the **overhead** is what a job takes beyond its prefill (decoding a gist, the rendering around
  it): the exponentially weighted mean of each model job's measured time less its prefill part;
* the **input tokens** of a job are ``Summarizer.model_input_tokens(items, target)`` once its
  region is planned; before that (when the look-ahead decides how early to plan) the mean input of
  the model jobs so far, or before the first one, the warm-up's.

The other way round, :meth:`ModelCost.tokens_in` says how many input tokens the time a job has
buys: when the whole job would not be ready in time, the job scores only that many
(``Summarizer.digest(..., model_tokens=...)``): a small model job instead of none.

Queueing is added where it applies: a job that holds the model lane starts on it at once; a job not
yet planned first waits in the scheduler's queue (its measured wait, watcher.serve.scheduler).
Nothing here is a constant of some machine: before the warm-up there is no estimate (``None``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from summarizer import gist
from summarizer.digest import Summarizer
from watcher.observe import logs

log = logs.get("compactd.model")

ALPHA = 0.3  # weight of the newest observation
MIN_MODEL_TOKENS = 64  # a model job whose time buys fewer input tokens than this is not started
# A fixed text for the warm-up prefill: a few lines of the kind of input the model reads (a test run's
# output and a short note), ~300 tokens, always the same so that runs compare.
WARMUP_TEXT = "\n".join(
    [
        "The agent ran the test suite after changing the parser to accept trailing commas.",
        *(
            f"tests/test_parser.py::test_case_{i:03d} {'PASSED' if i % 7 else 'FAILED'} [{i:3d}%]"
            for i in range(1, 25)
        ),
        "E   AssertionError: expected ParseError for input '[1, 2,]' but got [1, 2]",
        "FAILED tests/test_parser.py::test_case_007 - AssertionError: trailing comma accepted",
        "The failure is in parse_list: the comma branch does not check for the closing bracket.",
    ]
)


def engine_totals(stats: Mapping[str, float]) -> tuple[float, float]:
    """(tokens prefilled or scored, seconds they took) so far, from an engine's ``stats()``
    (summarizer.engine.LlamaEngine; a remote backend reports its local fallback's, or nothing)."""
    tokens = seconds = 0.0
    prefilled = stats.get("prompt_tokens", 0.0) - stats.get("reused_prompt_tokens", 0.0)
    for n, tps in (
        (prefilled, stats.get("prefill_tps", 0.0)),
        (stats.get("scored_tokens", 0.0), stats.get("score_tps", 0.0)),
    ):
        if n > 0 and tps > 0:
            tokens, seconds = tokens + n, seconds + n / tps
    return tokens, seconds


class ModelCost:
    """The daemon's estimate of a model job's seconds (one per daemon: one model, one lane)."""

    def __init__(self) -> None:
        self.rate = 0.0  # prefill tokens/s; 0 = not measured yet
        self.overhead_s = 0.0  # EWMA seconds of a model job beyond its prefill
        self.input_tokens = 0.0  # EWMA tokens a model job reads
        self.jobs = 0  # model jobs recorded
        self.warmup: dict[str, float] = {}  # the warm-up's measurement (STATUS)
        self._totals: tuple[float, float] = (0.0, 0.0)  # engine_totals at the last reading

    @property
    def measured(self) -> bool:
        return self.rate > 0

    def warmed(self, tokens: int, seconds: float, totals: tuple[float, float]) -> None:
        """The warm-up prefill read ``tokens`` in ``seconds``; ``totals``: the engine's after it."""
        if tokens <= 0 or seconds <= 0:
            return
        self.rate = tokens / seconds
        if not self.jobs:
            self.input_tokens = float(tokens)
        self._totals = totals
        self.warmup = {"tokens": tokens, "seconds": round(seconds, 4), "tokens_per_s": round(self.rate, 1)}

    def expect(self, input_tokens: int | None = None) -> float | None:
        """Seconds a model job reading ``input_tokens`` (default: the mean so far) is expected to
        take once it runs; None before the first measurement."""
        if not self.measured:
            return None
        n = self.input_tokens if input_tokens is None else input_tokens
        return n / self.rate + self.overhead_s

    def tokens_in(self, seconds: float) -> int | None:
        """Input tokens a model job can read in ``seconds`` (its prefill at the measured rate, after
        the measured overhead): the job's budget when the whole job would not fit (None before the
        first measurement; 0 when not even the overhead fits)."""
        if not self.measured:
            return None
        if seconds == float("inf"):
            return 1 << 30
        return max(0, int((seconds - self.overhead_s) * self.rate))

    def smaller_job(self, seconds: float, reads: Callable[[int], int]) -> tuple[int, int] | None:
        """The job that fits ``seconds``: (the most tokens it may score, the tokens it then reads),
        where ``reads(n)`` is what a job scoring at most ``n`` reads (its prefix, and gists when on,
        come out of the budget too); None when it would score fewer than :data:`MIN_MODEL_TOKENS`."""
        budget = self.tokens_in(seconds) or 0
        tokens = budget
        n = reads(tokens)
        if n > budget:
            tokens = max(0, tokens - (n - budget))
            n = reads(tokens)
        return (tokens, n) if tokens >= MIN_MODEL_TOKENS and n <= budget else None

    def record(self, input_tokens: int, seconds: float, totals: tuple[float, float]) -> None:
        """A model job read ``input_tokens`` and took ``seconds``; ``totals``: the engine's
        :func:`engine_totals` now (the rate of this job's prefill is their change)."""
        tokens, spent = totals[0] - self._totals[0], totals[1] - self._totals[1]
        self._totals = totals
        if tokens > 0 and spent > 0:
            self.rate = _ewma(self.rate, tokens / spent) if self.rate else tokens / spent
        if not self.rate:
            return
        overhead = max(0.0, seconds - input_tokens / self.rate)
        self.overhead_s = _ewma(self.overhead_s, overhead) if self.jobs else overhead
        self.input_tokens = (
            _ewma(self.input_tokens, float(input_tokens)) if self.jobs else float(input_tokens)
        )
        self.jobs += 1

    def stats(self) -> dict[str, Any]:
        """STATUS ``daemon.model_cost``."""
        expect = self.expect()
        return {
            "prefill_tokens_per_s": round(self.rate, 1),
            "overhead_s": round(self.overhead_s, 3),
            "input_tokens": round(self.input_tokens),
            "expected_job_s": None if expect is None else round(expect, 3),
            "jobs": self.jobs,
            "warmup": dict(self.warmup),
        }


async def warm_up(summarizer: Summarizer, cost: ModelCost) -> None:
    """Prime the summarizer's fixed prefix, then time one prefill of :data:`WARMUP_TEXT` (one
    output token) on the model's thread: the first estimate of the prefill rate. A failure is
    logged, and the estimate waits for the first real job."""
    engine = summarizer.engine
    if engine is None:
        return
    try:
        await summarizer.warm()
        t0 = time.perf_counter()
        gen = await engine.generate(gist.PREFIX, WARMUP_TEXT, gist.SUFFIX, max_tokens=1)
        wall = time.perf_counter() - t0
    except Exception as exc:  # the model is there but failing: the jobs will say so
        log.warning("model_warmup_failed", error=f"{type(exc).__name__}: {exc}")
        return
    read = gen.prompt_tokens - gen.reused_tokens
    seconds = gen.prefill_s if gen.prefill_s > 0 else wall  # a remote backend may not split its time
    cost.warmed(read, seconds, engine_totals(engine.stats()))
    log.info("model_warmed", prefill_tokens=read, seconds=round(seconds, 4), tokens_per_s=round(cost.rate, 1))


def _ewma(old: float, new: float) -> float:
    return (1 - ALPHA) * old + ALPHA * new
