"""Signal recall against the digest's target on CILogBench: the deterministic digest and, with
`--model`, the model's (q4_0, as `compactd bench signals`' `digest-model`), at 1/8 and smaller
targets. Issue 15's signals goal asks the model's digest at 1/8 for +0.05 recall or the same recall
in <= 0.8x the tokens; this shows where each digest's recall starts to fall, i.e. whether the
benchmark has room for either.

PYTHONPATH=. .venv/bin/python bench/results/signals/stop53/curve.py [--model] [--divisors 8,10,16,32,64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

from summarizer.digest import Item, Summarizer
from watcher.eval.bench.cilog import find_cases, normalize, score
from watcher.eval.replay import token_counter

ROOT = Path("/tmp/shared/cilogbench")  # ../shared/cilogbench, linked where the bench scripts read it


async def main() -> list[dict[str, object]]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="store_true")
    ap.add_argument("--divisors", default="8,10,16,32,64")
    ap.add_argument("--json")
    args = ap.parse_args()
    count = token_counter(True)
    methods: dict[str, Summarizer] = {"digest": Summarizer(None, count=count)}
    if args.model:
        sys.path.insert(0, "bench")
        from nfr_offline import model_summarizer

        methods["digest-model"] = model_summarizer(count)
    divisors = [int(d) for d in args.divisors.split(",")]
    rows = []
    for case in find_cases(ROOT):
        tokens = count(case.raw)
        raw_n = normalize(case.raw)
        for div in divisors:
            for name, summ in methods.items():
                item = Item("s1", "tool_result", case.raw, tokens)
                d = await summ.digest([item], "a1", max(1, tokens // div))
                s = score(case, d.text, raw_n)
                rows.append({"case": case.name, "split": case.split, "divisor": div, "method": name,
                             "recall": s.recall, "tokens": d.tokens, "method_used": d.method,
                             "missed": list(s.missed)})  # fmt: skip
    print("method        1/N   recall(mean)  min    tokens(sum)  cases<1")
    for name in methods:
        for div in divisors:
            rs = [r for r in rows if r["method"] == name and r["divisor"] == div]
            rec = [r["recall"] for r in rs]
            below = sum(1 for x in rec if x < 1)
            toks = sum(r["tokens"] for r in rs)
            print(
                f"{name:12} {div:4d}   {statistics.mean(rec):.3f}        {min(rec):.3f}  {toks:9d}    {below}"
            )
    return rows


if __name__ == "__main__":
    out = asyncio.run(main())
    if "--json" in sys.argv:
        Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(out, indent=1))
