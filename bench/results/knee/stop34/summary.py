"""Median (range) per arm of the first step's figures in arms.sh's JSON files (NAME-ROUND.json).

Usage: python bench/results/knee/stop33/summary.py DIR [DIR ...]
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

KEYS = (
    "ingest_ms_p99",
    "ingest_ms_p50",
    "overflow_calls",
    "stalled_calls",
    "pss_mb_max",
    "model_jobs",
    "queue_wait_ms_p99",
    "daemon_cpu_pct_mean",
)


def main(dirs: list[str]) -> None:
    for d in dirs:
        runs: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)
        for f in sorted(Path(d).glob("*.json")):
            m = re.fullmatch(r"(.+)-(\d+)\.json", f.name)
            if not m:
                continue
            step = json.loads(f.read_text())["steps"][0]
            runs[m[1]][int(m[2])] = {k: step.get(k) for k in KEYS}
        print(d)
        for arm, rounds in runs.items():
            print(f"  {arm} ({len(rounds)} rounds)")
            for k in KEYS:
                vals = [rounds[r][k] for r in sorted(rounds) if rounds[r][k] is not None]
                if not vals:
                    continue
                each = " / ".join(f"{v:g}" for v in vals)
                print(f"    {k:22} {statistics.median(vals):10.1f} ({min(vals):g}-{max(vals):g})  [{each}]")


if __name__ == "__main__":
    main(sys.argv[1:])
