"""What a replay counts for each proposal the agent applied, and how runs aggregate."""

from __future__ import annotations

from ipc.protocol import Proposal
from ipc.sections import Section
from watcher.eval.scorecard import EngineWork, Run, aggregate


def sec(sid: str, kind: str, tokens: int, text: str = "") -> Section:
    return Section(sid, kind, text or f"text of {sid}", tokens=tokens)


def proposal(pid: str, replaces: list[Section], digest: list[Section], invalidated: int = 100) -> Proposal:
    return Proposal(
        proposal=pid,
        base=1,
        replaces=tuple(s.id for s in replaces),
        digest=tuple(digest),
        tokens_before=sum(s.tokens for s in replaces),
        tokens_after=sum(s.tokens for s in digest),
        invalidated_prefix_tokens=invalidated,
        archive=(f"a-{pid}",),
    )


def test_applied_counts_only_what_changed() -> None:
    run = Run("t", 1000, 0.15, high=850, low=600)
    run.usage = [900, 950]
    a, b, c = sec("a", "assistant", 100), sec("b", "tool_result", 300), sec("c", "assistant", 50)
    # masking: a and c pass through unchanged, b becomes a placeholder under the same id
    masked = Section("b", "tool_result", "[omitted; recall a-p1]", tokens=10)
    run.applied(proposal("p1", [a, b, c], [a, masked, c]), [a, b, c])
    assert (run.compacted_in, run.compacted_out) == (300, 10)
    assert run.removed == {"b": 2} and run.compacted_by == {"b": ("a-p1",)}
    # a digest that rewrites an earlier digest, and one that is not smaller than its input
    d1 = sec("d1", "digest", 40)
    run.applied(proposal("p2", [d1, c], [sec("d2", "digest", 60)]), [d1, c])
    run.applied(proposal("p3", [a], [sec("d3", "digest", 100)]), [a])
    m = run.metrics()
    assert m["digest_of_digest"] == 1 and m["digest_larger_than_input"] == 1
    assert m["compactions"] == 3 and m["cache_bust_events"] == 1, "three proposals before one call"
    assert m["compression_ratio"] == round((300 + 90 + 100) / (10 + 60 + 100), 2)
    assert m["turns_over_high_watermark"] == 1.0 and m["peak_utilization"] == 0.95


def test_aggregate_pools_stalls_and_weights_by_turns() -> None:
    r1 = Run("one", 1000, 0.15, high=850)
    r1.usage, r1.stalls_ms = [100, 900], [0.0, 0.0]
    r2 = Run("two", 1000, 0.15, high=850)
    r2.usage, r2.stalls_ms = [100] * 8, [0.0] * 7 + [5000.0]
    r2.engine = EngineWork(prefilled=1000, prefill_s=2.0, decoded=100, decode_s=4.0)
    agg = aggregate([r1, r2])
    assert agg["turns"] == 10 and agg["turns_over_high_watermark"] == 0.1
    assert agg["stall_ms_total"] == 5000.0 and agg["stall_ms_p99"] > 4000
    assert agg["summarizer_prefill_tps"] == 500.0 and agg["summarizer_decode_tps"] == 25.0
    assert agg["canary_in_context"] is None and agg["regret"] is None


def test_engine_work_from_status() -> None:
    stats = {"prompt_tokens": 1500, "reused_prompt_tokens": 500, "completion_tokens": 80}
    work = EngineWork.from_stats(stats | {"prefill_tps": 250.0, "decode_tps": 20.0})
    assert (work.prefilled, work.prefill_s, work.decoded, work.decode_s) == (1000, 4.0, 80, 4.0)
    assert EngineWork.from_stats(None) == EngineWork()
    # the model's line scoring is a prefill too (the model's main work by default)
    scoring = EngineWork.from_stats(stats | {"prefill_tps": 250.0, "scored_tokens": 600, "score_tps": 300.0})
    assert (scoring.prefilled, scoring.prefill_s) == (1600, 6.0)
    assert (work - work).rates() == {"summarizer_prefill_tps": None, "summarizer_decode_tps": None}


def test_digest_methods_per_run_and_pooled() -> None:
    """The replay report's ``digest_methods``: applied proposals by the method their digest
    section carries, the model's share, and why the daemon skipped the model during the run."""
    a, b = sec("a", "assistant", 300), sec("b", "tool_result", 300)

    def digest(did: str, method: str) -> Section:
        return Section(did, "digest", "d", tokens=20, meta={"method": method})

    masked = Section("b", "tool_result", "[omitted]", tokens=10, meta={"masked": "1", "method": "masking"})
    r1 = Run("one", 1000, 0.15)
    r1.applied(proposal("p1", [a], [digest("d1", "model")]), [a])
    r1.applied(proposal("p2", [a, b], [a, masked]), [a, b])  # masking: unchanged a carries no method
    r1.model_skipped = {"busy": 1}
    r2 = Run("two", 1000, 0.15)
    r2.applied(proposal("p3", [b], [digest("d3", "deterministic")]), [b])
    r2.applied(proposal("p4", [a], [digest("d4", "headtail")]), [a])
    r2.model_skipped = {"busy": 2, "degraded": 1}
    assert r1.metrics()["digest_methods"] == {
        "masking": 1,
        "model": 1,
        "model_share": 0.5,
        "model_skipped": {"busy": 1},
    }
    pooled = aggregate([r1, r2])["digest_methods"]
    assert pooled["model"] == 1 and pooled["deterministic"] == 1 and pooled["headtail"] == 1
    assert pooled["model_share"] == 0.25 and pooled["model_skipped"] == {"busy": 3, "degraded": 1}
