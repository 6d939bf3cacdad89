"""What one replayed trajectory measured (``Run``), its metrics, and the aggregate over many.

Everything here is measured on the agent's side of the wire: the context the agent holds at each
LLM call, how long it waited, and what each proposal it applied did to that context.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ipc.protocol import Proposal
from ipc.sections import Section
from watcher.eval.canaries import CanaryTally
from watcher.eval.nfr import pooled


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def spread(values: list[float], digits: int = 3) -> dict[str, Any]:
    """Median and range of a figure measured in several rounds (and the rounds themselves)."""
    if not values:
        return {"median": None, "min": None, "max": None, "rounds": []}
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "rounds": [round(v, digits) for v in values],
    }


@dataclass
class EngineWork:
    """Summarizer work done during a run, from the daemon's STATUS (``daemon.summarizer``)."""

    prefilled: float = 0.0  # prompt tokens evaluated (not reused), the scoring prefills' included
    prefill_s: float = 0.0
    decoded: float = 0.0
    decode_s: float = 0.0

    @classmethod
    def from_stats(cls, stats: Any) -> EngineWork:
        """Totals from LlamaEngine.stats(); seconds are derived from the tokens and the rates."""
        if not isinstance(stats, dict):
            return cls()
        prefilled = float(stats.get("prompt_tokens", 0)) - float(stats.get("reused_prompt_tokens", 0))
        decoded = float(stats.get("completion_tokens", 0))
        ptps, dtps = float(stats.get("prefill_tps", 0.0)), float(stats.get("decode_tps", 0.0))
        scored, stps = float(stats.get("scored_tokens", 0)), float(stats.get("score_tps", 0.0))
        seconds = (prefilled / ptps if ptps else 0.0) + (scored / stps if stps else 0.0)
        return cls(prefilled + scored, seconds, decoded, decoded / dtps if dtps else 0.0)

    def __sub__(self, other: EngineWork) -> EngineWork:
        return EngineWork(
            self.prefilled - other.prefilled,
            self.prefill_s - other.prefill_s,
            self.decoded - other.decoded,
            self.decode_s - other.decode_s,
        )

    def __add__(self, other: EngineWork) -> EngineWork:
        return EngineWork(
            self.prefilled + other.prefilled,
            self.prefill_s + other.prefill_s,
            self.decoded + other.decoded,
            self.decode_s + other.decode_s,
        )

    def rates(self) -> dict[str, float | None]:
        return {
            "summarizer_prefill_tps": round(self.prefilled / self.prefill_s, 1)
            if self.prefill_s > 0
            else None,
            "summarizer_decode_tps": round(self.decoded / self.decode_s, 1) if self.decode_s > 0 else None,
        }


@dataclass
class Run:
    """One trajectory played under one policy."""

    name: str
    budget: int
    reserve: float
    policy: str = "optimistic"
    high: int = 0  # the daemon's watermarks for this agent (WELCOME), in tokens
    low: int = 0
    usage: list[int] = field(default_factory=list)  # tokens at each LLM call
    stalls_ms: list[float] = field(default_factory=list)  # the wait before each LLM call
    overflow_turns: int = 0
    compactions: int = 0
    stale: int = 0
    tokens_saved: int = 0
    invalidated: int = 0
    bust_calls: set[int] = field(default_factory=set)  # LLM calls whose prompt prefix had changed
    compacted_in: int = 0  # tokens of the sections proposals took out ...
    compacted_out: int = 0  # ... and of what they put in their place
    digest_of_digest: int = 0  # proposals that rewrote an earlier digest
    digest_larger: int = 0  # proposals whose replacement was not smaller than what it replaced
    events: list[tuple[int, int]] = field(default_factory=list)  # (LLM call, tokens saved) per proposal
    removed: dict[str, int] = field(default_factory=dict)  # section id -> first LLM call without it
    compacted_by: dict[str, tuple[str, ...]] = field(default_factory=dict)  # section id -> archive refs
    canaries: CanaryTally | None = None
    regret: dict[str, Any] | None = None  # watcher.eval.regret.Regret.metrics()
    added: dict[str, tuple[str, int]] = field(default_factory=dict)  # replacement id -> (text, first call)
    nfr: dict[str, Any] | None = None  # watcher.eval.nfr.Retention.metrics()
    engine: EngineWork = field(default_factory=EngineWork)
    methods: dict[str, int] = field(default_factory=dict)  # applied proposals by digest method
    # why the daemon's jobs skipped the model during the run (daemon-wide: with --jobs > 1 the
    # trajectories played at the same time share it, like the engine figures)
    model_skipped: dict[str, int] = field(default_factory=dict)

    def applied(self, p: Proposal, before: list[Section | None]) -> None:
        """Account for a proposal the agent applied; ``before`` = the replaced sections as they were."""
        old = {s.id: s for s in before if s is not None}
        taken = list(taken_out(p, before))
        put = [d for d in p.digest if not (d.id in old and old[d.id].text == d.text)]
        t_in, t_out = sum(s.tokens for s in taken), sum(d.tokens for d in put)
        call = len(self.usage)  # the first LLM call that sees the change
        self.compactions += 1
        method = next((m for d in p.digest if (m := d.meta.get("method"))), "unknown")
        self.methods[method] = self.methods.get(method, 0) + 1
        self.tokens_saved += p.tokens_before - p.tokens_after
        self.invalidated += p.invalidated_prefix_tokens
        if p.invalidated_prefix_tokens > 0:  # several proposals between two calls: one cache miss
            self.bust_calls.add(call)
        self.compacted_in += t_in
        self.compacted_out += t_out
        self.digest_of_digest += any(s.kind == "digest" for s in taken)
        self.digest_larger += bool(taken) and t_out >= t_in
        self.events.append((call, t_in - t_out))
        for s in taken:
            self.removed.setdefault(s.id, call)
            self.compacted_by.setdefault(s.id, p.archive)
        for d in put:
            self.added.setdefault(d.id, (d.text, call))

    def metrics(self) -> dict[str, Any]:
        turns = len(self.usage)
        high = self.high or int(self.budget * (1 - self.reserve))
        out: dict[str, Any] = {
            "turns": turns,
            "budget_tokens": self.budget,
            "reserve_ratio": self.reserve,
            "peak_utilization": round(max(self.usage, default=0) / self.budget, 4),
            "turns_over_high_watermark": round(sum(u > high for u in self.usage) / turns, 4)
            if turns
            else 0.0,
            "overflow_turns": self.overflow_turns,
            "stall_ms_total": round(sum(self.stalls_ms), 1),
            "stall_ms_p99": round(percentile(self.stalls_ms, 99), 1),
            "stalled_turns": sum(s > 0 for s in self.stalls_ms),
            "compactions": self.compactions,
            "stale_proposals": self.stale,
            "tokens_saved": self.tokens_saved,
            "compression_ratio": _ratio(self.compacted_in, self.compacted_out),
            "cache_invalidated_tokens": self.invalidated,
            "cache_bust_events": len(self.bust_calls),
            "digest_of_digest": self.digest_of_digest,
            "digest_larger_than_input": self.digest_larger,
            "regret": self.regret.get("regret") if self.regret else None,
            "regret_raw": self.regret.get("regret_raw") if self.regret else None,
        }
        if self.regret:  # per trajectory: what was folded, what of it the agent needed again
            out["compacted_sections"] = self.regret.get("compacted_sections", 0)
            out["regretted_ids"] = list(self.regret.get("regretted_ids", ()))
        out |= self.nfr or pooled([])
        out["digest_methods"] = digest_methods([self])
        out |= self.engine.rates()
        out |= self.canaries.metrics() if self.canaries else _no_canaries()
        if self.canaries:
            out["canaries_lost"] = list(self.canaries.lost)  # compacted, and not verbatim in the context
        return out

    def series(self) -> dict[str, Any]:
        """The per-call data the plot needs."""
        return {
            "usage": list(self.usage),
            "stalls_ms": [round(s, 1) for s in self.stalls_ms],
            "compactions": [list(e) for e in self.events],
            "high_watermark": self.high,
            "low_watermark": self.low,
        }


def taken_out(p: Proposal, before: Sequence[Section | None]) -> tuple[Section, ...]:
    """The sections of ``before`` (what ``p`` replaces, as the agent held them) that ``p`` takes
    out of the context: not those it passes through unchanged (same id, same text: the sections
    of a masking range that are not masked). These are the originals its archive must hold."""
    kept = {(d.id, d.text) for d in p.digest}
    return tuple(s for s in before if s is not None and (s.id, s.text) not in kept)


def _ratio(num: float, den: float) -> float | None:
    return round(num / den, 2) if den else None


def _no_canaries() -> dict[str, Any]:
    return {"canary_in_context": None, "canary_recall": None}


def digest_methods(runs: list[Run]) -> dict[str, Any]:
    """Applied proposals by digest method (model, deterministic, masking, headtail), the model's
    share, and why the daemon's jobs skipped the model (watcher.serve.degrade)."""
    methods: dict[str, int] = {}
    skipped: dict[str, int] = {}
    for r in runs:
        for k, n in r.methods.items():
            methods[k] = methods.get(k, 0) + n
        for k, n in r.model_skipped.items():
            skipped[k] = skipped.get(k, 0) + n
    total = sum(methods.values())
    share = round(methods.get("model", 0) / total, 4) if total else None
    out: dict[str, Any] = dict(sorted(methods.items()))
    return out | {"model_share": share, "model_skipped": dict(sorted(skipped.items()))}


def aggregate(runs: list[Run]) -> dict[str, Any]:
    """The same keys over many runs: sums, maxima, turn-weighted means and pooled percentiles."""
    if not runs:
        return {}
    ms = [r.metrics() for r in runs]
    turns = sum(m["turns"] for m in ms)
    stalls = [s for r in runs for s in r.stalls_ms]
    over = sum(m["turns_over_high_watermark"] * m["turns"] for m in ms)
    engine = EngineWork()
    for r in runs:
        engine = engine + r.engine
    regret_runs = [r.regret for r in runs if r.regret]
    compacted = sum(int(g.get("compacted_sections", 0)) for g in regret_runs)
    regretted = sum(int(g.get("regretted_sections", 0)) for g in regret_runs)
    raw = sum(float(g.get("regret_raw", 0.0)) * int(g.get("compacted_sections", 0)) for g in regret_runs)
    out: dict[str, Any] = {
        "trajectories": len(runs),
        "turns": turns,
        "budget_tokens": runs[0].budget,
        "reserve_ratio": runs[0].reserve,
        "peak_utilization": max(m["peak_utilization"] for m in ms),
        "turns_over_high_watermark": round(over / turns, 4) if turns else 0.0,
        "overflow_turns": sum(m["overflow_turns"] for m in ms),
        "stall_ms_total": round(sum(stalls), 1),
        "stall_ms_p99": round(percentile(stalls, 99), 1),
        "stalled_turns": sum(m["stalled_turns"] for m in ms),
        "compactions": sum(m["compactions"] for m in ms),
        "stale_proposals": sum(m["stale_proposals"] for m in ms),
        "tokens_saved": sum(m["tokens_saved"] for m in ms),
        "compression_ratio": _ratio(sum(r.compacted_in for r in runs), sum(r.compacted_out for r in runs)),
        "cache_invalidated_tokens": sum(m["cache_invalidated_tokens"] for m in ms),
        "cache_bust_events": sum(m["cache_bust_events"] for m in ms),
        "digest_of_digest": sum(m["digest_of_digest"] for m in ms),
        "digest_larger_than_input": sum(m["digest_larger_than_input"] for m in ms),
        "regret": round(regretted / compacted, 4) if compacted else (0.0 if regret_runs else None),
        "regret_raw": round(raw / compacted, 4) if compacted else (0.0 if regret_runs else None),
    }
    out |= pooled(ms)
    out["digest_methods"] = digest_methods(runs)
    out |= engine.rates()
    tallies = [r.canaries for r in runs if r.canaries is not None]
    if tallies:
        total = CanaryTally()
        for t in tallies:
            total.add(t)
        out |= total.metrics()
    else:
        out |= _no_canaries()
    return out
