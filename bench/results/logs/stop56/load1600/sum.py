"""Per-run figures and medians of ab.sh / ab2.sh's load steps: python3 sum.py TAG (nomodel, nomodel2,
model), reading TAG-{base56,new56}-{1,2,3}.json from this folder."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).parent
KEYS = [
    "ingest_ms_p99", "daemon_loop_lag_ms_p99", "daemon_cpu_pct_mean", "compactions_per_s", "overflow_calls",
    "stalled_calls", "queue_wait_ms_p99", "pss_mb_max", "cpu_ms_per_compaction",
]  # fmt: skip
tag = sys.argv[1]
rows: dict[str, list[dict[str, float]]] = {}
for tree in ("base56", "new56"):
    for r in (1, 2, 3):
        path = HERE / f"{tag}-{tree}-{r}.json"
        if not path.exists():
            continue
        step = json.loads(path.read_text())["steps"][0]
        step["cpu_ms_per_compaction"] = round(step["daemon_cpu_pct_mean"] * 10 / step["compactions_per_s"], 2)
        rows.setdefault(tree, []).append(step)
        print(tree, r, {k: step.get(k) for k in KEYS})
for tree, steps in rows.items():
    print(tree, "median:", {k: statistics.median([s.get(k) or 0 for s in steps]) for k in KEYS})
