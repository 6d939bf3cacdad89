"""RSS of a process that holds the model, at each stage: imported, loaded, after a gist, after scoring.

What the model adds to the daemon's memory (issue 17: daemon RSS at the knee <= 400 MB with the
model loaded). The default configuration's engine (``q4_0`` weights, ``n_ctx`` 2048, ``n_batch`` 512):
a 32-token gist of ~3000 characters, then one scoring pass over 200 log-like lines (~5000 tokens).
Run it on two trees to compare (``PYTHONPATH=TREE``). Prints JSON.

.venv/bin/python bench/model_rss.py [--weights q4_0] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path


def rss_mb() -> dict[str, float]:
    out: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


async def measure(weights: str) -> dict[str, object]:
    stages = {"start": rss_mb()}
    from summarizer.engine import EngineSettings, LlamaEngine
    from watcher.runtime.paths import default_model_path

    stages["imported"] = rss_mb()
    eng = LlamaEngine(EngineSettings(default_model_path(), weights=weights, flash_attn=True))
    stages["loaded"] = rss_mb()
    text = "\n".join(f"step {i}: the agent ran pytest on tests/test_io.py: {i} failed" for i in range(40))
    await eng.generate("Summarize:\n", text, "\nSummary:", max_tokens=32, timeout_s=300)
    stages["after_gist"] = rss_mb()
    lines = [f"line {i}: error in module_{i}.py at foo() reading config key {i * 7}" for i in range(200)]
    t0 = time.perf_counter()
    scored = await eng.score("<|im_start|>", lines, timeout_s=900)
    seconds = time.perf_counter() - t0
    stages["after_score"] = rss_mb()
    eng.close()
    return {
        "weights": weights,
        "stages_mb": stages,
        "model_adds_mb": round(stages["after_score"]["VmRSS"] - stages["imported"]["VmRSS"], 1),
        "scored_tokens": scored.tokens,
        "score_tok_s": round(scored.tokens / seconds, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default="q4_0")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = asyncio.run(measure(args.weights))
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
