"""The model's digest against the deterministic one on CILogBench at fractions of the 1/8 target
(stop 50): can the model keep the same recall in less room (issue 15's "<= 0.8x the tokens")?

Run from a tree's root (the model at the default weights, ~15 min on 2 cores):
PYTHONPATH=TREE .venv/bin/python -P bench/results/select/stop50/model_frac.py 1.0 0.8 0.7
"""

from __future__ import annotations

import asyncio
import statistics
import sys

from summarizer.digest import Item, Summarizer
from summarizer.engine import EngineSettings, LlamaEngine
from summarizer.tokenizer import load_counter
from summarizer.weights import normalize as normalize_weights
from watcher.eval.bench.cilog import DEFAULT_CASES, find_cases, normalize, score
from watcher.eval.bench.signals import deterministic
from watcher.runtime.paths import default_model_path

FRACTIONS = tuple(float(x) for x in sys.argv[1:]) or (1.0, 0.8)


async def main() -> None:
    path = default_model_path()
    count = load_counter(path)
    engine = LlamaEngine(EngineSettings(path, timeout_s=600.0, weights=normalize_weights("q4_0")))
    model = Summarizer(engine, gist_budget_s=600.0)
    det = deterministic(count)
    rows: dict[tuple[str, float, str], tuple[str, int, float]] = {}
    for case in find_cases(DEFAULT_CASES, ()):
        tokens = count(case.raw)
        raw_norm = normalize(case.raw)
        item = Item("s1", "tool_result", case.raw, tokens)
        line = []
        for f in FRACTIONS:
            for name, summ in (("det", det), ("model", model)):
                d = await summ.digest([item], "a1", max(1, int(tokens // 8 * f)))
                rows[(case.name, f, name)] = (case.split, count(d.text), score(case, d.text, raw_norm).recall)
                line.append((f, name, count(d.text), round(rows[(case.name, f, name)][2], 3)))
        print(f"{case.name:28} {case.split:8} {tokens:7} {line}", flush=True)
    for split in ("dev", "holdout", "stress", "all"):
        out = []
        for f in FRACTIONS:
            for name in ("det", "model"):
                mine = [
                    v for (_, ff, nn), v in rows.items() if ff == f and nn == name and split in ("all", v[0])
                ]
                out.append((f, name, round(statistics.mean(v[2] for v in mine), 3), sum(v[1] for v in mine)))
        print(split, out, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
