"""Planted facts kept by deterministic digests (tests/summarizer/test_digest.py's regions), 4 seeds.

The test's measure (16 regions a seed, digest at the test's target, a planted sentence kept when it
is verbatim in the digest), over seeds 11-14. Run from a tree's root: PYTHONPATH=TREE python planted.py
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from pathlib import Path

from summarizer.digest import Summarizer
from watcher.runtime.paths import default_model_path

sys.path[:0] = ["tests/summarizer", "tests"]
td = importlib.import_module("test_digest")


async def main() -> None:
    mp = str(default_model_path())
    found_all = planted_all = 0
    for seed in (11, 12, 13, 14):
        regions = td._regions(Path("/tmp/shared/trajectories"), mp, 16, seed)
        summ = Summarizer(None, count=td.load_counter(mp))
        planted = found = 0
        for i, r in enumerate(regions):
            d = await summ.digest(r.items, f"a{i}", td.target(r))
            planted += len(r.planted)
            found += sum(1 for f in r.planted if f in d.text)
        print(seed, found, planted)
        found_all, planted_all = found_all + found, planted_all + planted
    print("total", found_all, planted_all)


asyncio.run(main())
