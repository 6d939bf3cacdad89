"""The deterministic digest's signal recall and tokens per CILogBench split at fractions of the 1/8
target (stop 48): does a change keep more at every size, or only at the one the bench asks for?

Run from a tree's root: PYTHONPATH=TREE .venv/bin/python bench/results/select/stop48/det_frac.py
"""

from __future__ import annotations

import asyncio
import statistics

from summarizer.digest import Item
from summarizer.tokenizer import load_counter
from watcher.eval.bench.cilog import DEFAULT_CASES, find_cases, normalize, score
from watcher.eval.bench.signals import deterministic
from watcher.runtime.paths import default_model_path

FRACTIONS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)


async def main() -> None:
    count = load_counter(default_model_path())
    rows: dict[tuple[str, float], tuple[str, int, float]] = {}
    for case in find_cases(DEFAULT_CASES, ()):
        tokens = count(case.raw)
        raw_norm = normalize(case.raw)
        item = Item("s1", "tool_result", case.raw, tokens)
        for f in FRACTIONS:
            d = await deterministic(count).digest([item], "a1", max(1, int(tokens // 8 * f)))
            rows[(case.name, f)] = (case.split, count(d.text), score(case, d.text, raw_norm).recall)
        shown = [(f, rows[(case.name, f)][1], round(rows[(case.name, f)][2], 3)) for f in FRACTIONS]
        print(f"{case.name:28} {case.split:8} {tokens:7} {shown}")
    print("split: (fraction, macro recall, tokens summed) per fraction")
    for split in ("dev", "holdout", "stress", "all"):
        line = []
        for f in FRACTIONS:
            mine = [v for (_, ff), v in rows.items() if ff == f and split in ("all", v[0])]
            line.append((f, round(statistics.mean(v[2] for v in mine), 3), sum(v[1] for v in mine)))
        print(split, line)


if __name__ == "__main__":
    asyncio.run(main())
