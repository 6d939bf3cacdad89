"""compress() and the deterministic digest at 1/8 over the 16 CILogBench logs, 3 passes each, in MB
per second of this process's CPU time. Interleave two trees:

for r in 1 2 3; do for t in A B; do (cd $t && PYTHONPATH=$t .venv/bin/python speed.py); done; done
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from summarizer.compressors import compress
from summarizer.digest import Item, Summarizer
from summarizer.tokenizer import load_counter
from watcher.runtime.paths import default_model_path

count = load_counter(str(default_model_path()))
LOGS = [p.read_text(errors="replace") for p in sorted(Path("/tmp/shared/cilogbench").glob("*/*/raw.log"))]


async def main() -> None:
    tokens = [count(t) for t in LOGS]
    c0 = time.process_time()
    for text in LOGS * 3:
        compress(text, ref="a1")
    c1 = time.process_time()
    for text, n in list(zip(LOGS, tokens, strict=True)) * 3:
        await Summarizer(None, count=count).digest([Item("s1", "tool_result", text, n)], "a1", max(1, n // 8))
    c2 = time.process_time()
    mb = sum(len(t) for t in LOGS) * 3 / 1e6
    print(f"compress {mb / (c1 - c0):.2f} MB/s  digest {mb / (c2 - c1):.2f} MB/s")


asyncio.run(main())
