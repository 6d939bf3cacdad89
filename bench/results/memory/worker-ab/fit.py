"""The digest worker's digests against digests counted with the tokenizer throughout: 80 regions
of the mini-swe-agent trajectories at 1/4 and 1/8 of their size.

    .venv/bin/python -P bench/results/memory/worker-ab/fit.py    # from the repository root
"""

import asyncio
import os
import random
import statistics
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from estimators import MODEL, texts

from summarizer.digest import Item, Summarizer
from summarizer.tokenizer import load_counter
from watcher.serve.digestpool import DigestPool


async def main() -> None:
    count = load_counter(MODEL)
    pool_texts = texts("../shared/trajectories/mini-swe-agent/*.json")
    rng = random.Random(1)
    pool = DigestPool()
    pooled, local = pool.summarizer(Summarizer(None, count=count)), Summarizer(None, count=count)
    worker, here, over = [], [], 0
    try:
        for _ in range(40):
            region = rng.sample(pool_texts, rng.randint(2, 6))
            items = [Item(f"s{i}", k, t, count(t)) for i, (k, t) in enumerate(region)]
            before = sum(i.tokens for i in items)
            for frac in (8, 4):
                target = max(60, before // frac)
                r, d = await pooled.digest(items, "a1", target), await local.digest(items, "a1", target)
                assert r.tokens == count(r.text)
                worker.append(r.tokens / target)
                here.append(d.tokens / target)
                over += r.tokens > target and d.tokens <= target
    finally:
        pool.close()
    for name, xs in (("worker", worker), ("tokenizer", here)):
        print(name, "tokens / target, deciles", [round(x, 3) for x in statistics.quantiles(xs, n=10)])
    print("over the target where the tokenizer's fits:", over, "of", len(worker))
    print("fitted twice:", pool.refits)


if __name__ == "__main__":
    asyncio.run(main())
