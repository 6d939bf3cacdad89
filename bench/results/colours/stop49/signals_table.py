"""The A/B of bench/results/select/stop48/ab/run.sh as one table: recall, summed tokens, MB/s per core.

python3 bench/results/colours/stop49/signals_table.py DIR   (DIR holds A-1..3.json and B-1..3.json)
"""

import json
import statistics
import sys
from pathlib import Path

d = Path(sys.argv[1])
for arm in "AB":
    runs = [json.loads((d / f"{arm}-{r}.json").read_text()) for r in (1, 2, 3)]
    for method in ("compress", "digest"):
        agg = [r["aggregate"][method] for r in runs]
        rec = " / ".join(f"{agg[0][s]['signal_recall']:.3f}" for s in ("all", "dev", "holdout", "stress"))
        first = runs[0]["rows"][0]["run"]  # tokens are deterministic: one run's
        toks = sum(
            row["tokens"] for row in runs[0]["rows"] if row["method"] == method and row["run"] == first
        )
        speed = [a["all"]["mb_per_s_cpu"] for a in agg]
        print(
            f"{arm} {method:8s} recall {rec}  tokens {toks}  median {agg[0]['all']['median_tokens']}  "
            f"MB/s/core {statistics.median(speed):.2f} ({min(speed):.2f}-{max(speed):.2f})"
        )
