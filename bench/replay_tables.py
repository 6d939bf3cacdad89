"""Markdown tables for docs/BENCHMARKS.md from the JSON of `compactd replay`.

.venv/bin/python bench/replay_tables.py docs/replay.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ORDER = ["optimistic", "recency", "reactive", "masking"]


def fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.0%}" if pct else f"{v:.0f}" if v >= 100 else f"{v:g}"
    return str(v)


def canary(a: dict[str, Any], kind: str) -> str:
    c = (a.get("canaries") or {}).get(kind) or {}
    if not c.get("compacted"):
        return f"– (0/{c.get('planted', 0)})"
    return f"{c['in_context'] / c['compacted']:.0%} ({c['in_context']}/{c['compacted']})"


def main(path: str) -> None:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    pols = [p for p in ORDER if p in data["policies"]] + [p for p in data["policies"] if p not in ORDER]
    agg = {p: data["policies"][p]["aggregate"] for p in pols}
    rows = [
        ("turns", "turns", False),
        ("peak utilization", "peak_utilization", True),
        ("turns over high watermark", "turns_over_high_watermark", True),
        ("overflow turns", "overflow_turns", False),
        ("stalled turns", "stalled_turns", False),
        ("stall ms total", "stall_ms_total", False),
        ("stall ms p99", "stall_ms_p99", False),
        ("compactions", "compactions", False),
        ("tokens saved", "tokens_saved", False),
        ("compression ratio", "compression_ratio", False),
        ("cache bust events", "cache_bust_events", False),
        ("cache invalidated tokens", "cache_invalidated_tokens", False),
        ("digest of digest", "digest_of_digest", False),
        ("digest larger than input", "digest_larger_than_input", False),
        ("regret", "regret", False),
        ("needed fact retention", "needed_fact_retention", True),
        ("needed facts", "needed_facts", False),
        ("needed facts kept", "needed_facts_kept", False),
        ("canary recall (archive)", "canary_recall", True),
        ("summarizer prefill tok/s", "summarizer_prefill_tps", False),
        ("summarizer decode tok/s", "summarizer_decode_tps", False),
    ]
    print("| | " + " | ".join(pols) + " |")
    print("|---|" + "---:|" * len(pols))
    for label, key, pct in rows:
        print(f"| {label} | " + " | ".join(fmt(agg[p].get(key), pct) for p in pols) + " |")
    for kind in ("user", "tool", "assistant"):
        print(f"| canaries in context, {kind} | " + " | ".join(canary(agg[p], kind) for p in pols) + " |")
    print()
    names = list(data["policies"][pols[0]]["trajectories"])
    print("Per trajectory: peak utilization / stalled turns / stall p99 ms / overflow turns.\n")
    print("| trajectory | turns | " + " | ".join(pols) + " |")
    print("|---|---:|" + "---|" * len(pols))
    for n in names:
        cells = []
        for p in pols:
            t = data["policies"][p]["trajectories"].get(n)
            if t is None:
                cells.append("–")
                continue
            peak, stalled = f"{t['peak_utilization']:.0%}", t["stalled_turns"]
            cells.append(f"{peak} / {stalled} / {t['stall_ms_p99']:.0f} / {t['overflow_turns']}")
        turns = data["policies"][pols[0]]["trajectories"][n]["turns"]
        print(f"| {n} | {turns} | " + " | ".join(cells) + " |")
    print()
    print("Per trajectory: regret (compacted sections referenced again later / compacted sections)")
    print("and turns over the high watermark.\n")
    print(
        "| trajectory | "
        + " | ".join(f"{p} regret" for p in pols)
        + " | "
        + " | ".join(f"{p} over high" for p in pols)
        + " |"
    )
    print("|---|" + "---:|" * (2 * len(pols)))
    for n in names:
        ts = [data["policies"][p]["trajectories"].get(n) or {} for p in pols]
        regrets = " | ".join(fmt(t.get("regret")) for t in ts)
        over = " | ".join(fmt(t.get("turns_over_high_watermark"), True) for t in ts)
        print(f"| {n} | {regrets} | {over} |")
    if "optimistic" in agg and "recency" in agg and agg["recency"].get("regret"):
        ratio = (agg["optimistic"].get("regret") or 0.0) / agg["recency"]["regret"]
        print(f"\noptimistic regret / recency regret (all trajectories): {ratio:.2f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: bench/replay_tables.py REPLAY.json")
    main(sys.argv[1])
