"""What one of the daemon's info lines costs, and a debug line below the level: the daemon's own
logging set up as `compactd run` sets it (JSON, level info), written to /dev/null, 5 rounds of
20 000 lines; microseconds a line, median and range. Interleave two trees:

for r in 1 2 3; do for t in A B; do PYTHONPATH=$t .venv/bin/python log_cost.py --tree $t; done; done
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--tree", default=".")
args = ap.parse_args()
out = sys.stdout
sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the daemon's lines go to stderr)
from watcher.observe import logs  # noqa: E402

logs.configure("info", "json")
log = logs.get("compactd.serve.jobs")
N = 20_000
info: list[float] = []
debug: list[float] = []
for _ in range(5):
    t = time.perf_counter()
    for _ in range(N):  # digest_done's fields
        log.info("digest_done", agent="agent-0042", method="model", model_skipped="", used_model=True,
                 model_input=1234, model_tokens=321, ranked_ahead=3, seconds=0.123)  # fmt: skip
    info.append((time.perf_counter() - t) / N * 1e6)
    t = time.perf_counter()
    for _ in range(N):
        log.debug("below_the_level", agent="agent-0042")
    debug.append((time.perf_counter() - t) / N * 1e6)
row = {
    "tree": args.tree,
    "info_us": round(statistics.median(info), 2),
    "info_us_range": [round(min(info), 2), round(max(info), 2)],
    "debug_us": round(statistics.median(debug), 2),
}
print(json.dumps(row), file=out)
