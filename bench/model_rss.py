"""RSS of a process that holds the model, at each stage: imported, loaded, after a gist, after scoring.

What the model adds to the daemon's memory (issue 17: daemon RSS at the knee <= 400 MB with the
model loaded). The default configuration's engine (``q4_0`` weights, ``n_ctx`` 2048, ``n_batch`` 512):
a 32-token gist of ~3000 characters, then one scoring pass over 200 log-like lines (~5000 tokens).
Run it on two trees to compare (``PYTHONPATH=TREE``). Prints JSON.

.venv/bin/python bench/model_rss.py [--weights q4_0] [--n-ubatch N] [--n-ctx N] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path


def rss_mb() -> dict[str, float]:
    out: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


async def measure(weights: str, n_ubatch: int = 0, n_ctx: int = 0) -> dict[str, object]:
    stages = {"start": rss_mb()}
    from summarizer.engine import EngineSettings, LlamaEngine
    from watcher.runtime.paths import default_model_path

    stages["imported"] = rss_mb()
    base = EngineSettings(default_model_path(), weights=weights, flash_attn=True, n_ubatch=n_ubatch)
    eng = LlamaEngine(replace(base, n_ctx=n_ctx) if n_ctx else base)
    stages["loaded"] = rss_mb()
    text = "\n".join(f"step {i}: the agent ran pytest on tests/test_io.py: {i} failed" for i in range(40))
    await eng.generate("Summarize:\n", text, "\nSummary:", max_tokens=32, timeout_s=300)
    stages["after_gist"] = rss_mb()
    long = "\n".join(f"{i}: collected tests/test_mod_{i}.py::test_case_{i * 3} PASSED" for i in range(30))
    t0 = time.perf_counter()
    await eng.generate("Read:\n", long, "\nDone.", max_tokens=1, timeout_s=300)
    prefill_s = time.perf_counter() - t0
    prefill_tokens = eng.count_tokens(long)
    lines = [f"line {i}: error in module_{i}.py at foo() reading config key {i * 7}" for i in range(200)]
    t0 = time.perf_counter()
    scored = await eng.score("<|im_start|>", lines, timeout_s=900)
    seconds = time.perf_counter() - t0
    stages["after_score"] = rss_mb()
    eng.close()
    return {
        "weights": weights,
        "n_ubatch": n_ubatch or eng.settings.n_batch,
        "n_ctx": eng.settings.n_ctx,
        "prefill_tok_s": round(prefill_tokens / prefill_s, 1),
        "stages_mb": stages,
        "model_adds_mb": round(stages["after_score"]["VmRSS"] - stages["imported"]["VmRSS"], 1),
        "scored_tokens": scored.tokens,
        "score_tok_s": round(scored.tokens / seconds, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default="q4_0")
    ap.add_argument("--n-ubatch", type=int, default=0, help="llama.cpp n_ubatch (default: the engine's)")
    ap.add_argument("--n-ctx", type=int, default=0, help="the model's context (default: the engine's)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = asyncio.run(measure(args.weights, args.n_ubatch, args.n_ctx))
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
