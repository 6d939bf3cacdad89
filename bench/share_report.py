"""One replay at the defaults, as issue 15 Deliver 3 reports it: the replay JSON's aggregate (digests by
method, NFR, canaries, stall, overflow, calls over the high watermark) and, from the daemon's own log
(copied while the replay ran), the exact count of each skip reason (the replay JSON's per-run
``model_skipped`` are deltas over overlapping windows with ``--jobs 4``), the model jobs' budgets
(``model_budget``) and times (``digest_done``).

.venv/bin/python bench/share_report.py REPLAY.json DAEMON.log [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from typing import Any


def events(path: str, name: str) -> list[dict[str, Any]]:
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            if f'"event": "{name}"' in line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return out


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("replay")
    ap.add_argument("log")
    ap.add_argument("--json")
    args = ap.parse_args()
    with open(args.replay) as f:
        agg = json.load(f)["policies"]["optimistic"]["aggregate"]
    done = events(args.log, "digest_done")
    budgets = events(args.log, "model_budget")
    model_jobs = [d for d in done if d["used_model"]]
    reasons = Counter(d["model_skipped"] or "-" for d in done if d["method"] != "model")
    small = [b for b in budgets if b.get("model_tokens") is not None]
    out = {
        "compactions": agg["compactions"],
        "digest_methods": agg["digest_methods"],
        "needed_fact_retention": agg["needed_fact_retention"],
        "canary_in_context": agg["canary_in_context"],
        "stall_ms_p99": agg["stall_ms_p99"],
        "stalled_turns": agg["stalled_turns"],
        "overflow_turns": agg["overflow_turns"],
        "turns_over_high_watermark": agg["turns_over_high_watermark"],
        "turns": agg["turns"],
        "summarizer_prefill_tps": agg.get("summarizer_prefill_tps"),
        "log": {
            "digests": len(done),
            "model": sum(1 for d in done if d["method"] == "model"),
            "not_model_by_reason": dict(reasons.most_common()),
            "model_jobs": len(model_jobs),
            "model_job_s_median": round(statistics.median([d["seconds"] for d in model_jobs]), 3)
            if model_jobs
            else None,
            "model_job_s_p90": round(pct([d["seconds"] for d in model_jobs], 0.9), 3),
            "model_input_tokens_median": statistics.median([d["model_input"] for d in model_jobs])
            if model_jobs
            else None,
            "budget_decisions": len(budgets),
            "in_time": sum(1 for b in budgets if b["in_time"]),
            "smaller_jobs": len(small),
            "smaller_job_tokens_median": statistics.median([b["model_tokens"] for b in small])
            if small
            else None,
            "whole_input_tokens_median": statistics.median([b["whole_input_tokens"] for b in budgets])
            if budgets
            else None,
            "expected_s_median": statistics.median([b["expected_s"] for b in budgets]) if budgets else None,
        },
    }
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
