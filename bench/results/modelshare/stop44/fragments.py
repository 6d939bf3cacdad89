"""Digests of the nfr_offline play (look-ahead 0, 3000, 1e6; both policies) that hold a piece of an
omission marker (summarizer.compress's head/tail cut). From a tree's root, with PYTHONPATH=TREE:

.venv/bin/python bench/results/modelshare/stop44/fragments.py
"""

from __future__ import annotations

import argparse
import glob
import re
import sys
from typing import Any

sys.path.insert(0, "bench")
import nfr_offline as N

from summarizer.digest import Digest, Item, Summarizer
from watcher.config.agents import AUTO_BAND, AUTO_LOW
from watcher.eval.replay import token_counter
from watcher.eval.trajectories import load_many
from watcher.planning.planner import Watermarks

FULL = re.compile(r"\[… \d+ chars omitted; recall [^\]\s]+\]")
S = "/tmp/shared/trajectories"
T = [
    *sorted(glob.glob(f"{S}/mini-swe-agent/*.json")),
    f"{S}/openhands/output.jsonl",
    f"{S}/openhands-nunu0404/output.jsonl",
    f"{S}/swe-agent/pydicom__pydicom-1458.traj",
]


def main() -> None:
    count = token_counter(True)
    summ = Summarizer(None, count=count)
    orig = summ.digest
    tally = {"digests": 0, "with_fragment": 0}

    async def checked(items: list[Item], ref: str, target: int, **kw: Any) -> Digest:
        d = await orig(items, ref, target, **kw)
        tally["digests"] += 1
        rest = [FULL.sub("", ln) for ln in d.text.split("\n")]
        tally["with_fragment"] += any("omitted" in r or re.search(r"^\s*recall \S+\]\s*$", r) for r in rest)
        return d

    summ.digest = checked  # type: ignore[method-assign]
    marks = Watermarks(N.BUDGET, N.RESERVE, min(AUTO_LOW, 1 - N.RESERVE - AUTO_BAND))
    sigmas = N.ScoreParams().evidence_sigmas
    for la in (0, 3000, 1000000):
        for strategy in ("optimistic", "recency"):
            how = argparse.Namespace(strategy=strategy, lookahead_tokens=la, evidence_sigmas=sigmas)
            for traj in load_many(T, count=count):
                N.play(traj, summ, marks, how)
    print(tally)


if __name__ == "__main__":
    main()
