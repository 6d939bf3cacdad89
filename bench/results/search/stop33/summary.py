"""Median (range) over rounds of `compactd bench store-search` JSON files NAME-ROUND.json, per arm.

Usage: python bench/results/search/stop33/summary.py DIR
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path


def main(folder: str) -> None:
    runs: dict[str, list[dict]] = {}
    for f in sorted(Path(folder).glob("*.json")):
        m = re.fullmatch(r"(.+)-(\d+)\.json", f.name)
        if m:
            runs.setdefault(m[1], []).append(json.loads(f.read_text()))
    for arm, ds in runs.items():
        print(f"{arm}: {len(ds)} rounds, goals met {[d['goals_met'] for d in ds]}")
        for q in ("rare", "common", "absent", "phrase", "short"):
            idx = [d["queries"][q]["index_ms"]["median"] for d in ds]
            scan = [d["queries"][q]["scan_ms"]["median"] for d in ds]
            same = all(d["queries"][q]["same_hits"] for d in ds)
            print(
                f"  {q:7} index {statistics.median(idx):8.2f} ({min(idx):.2f}-{max(idx):.2f}) ms"
                f"  scan {statistics.median(scan):8.2f} ms  same hits {same}"
            )
        puts = [d["put_ms"]["indexed"]["p99"] for d in ds]
        print(f"  put p99 ms {statistics.median(puts):.2f} ({min(puts):.2f}-{max(puts):.2f})")


if __name__ == "__main__":
    main(sys.argv[1])
