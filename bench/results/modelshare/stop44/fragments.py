"""Digests of the nfr_offline play (look-ahead 0, 3000, 1e6; both policies) that hold a piece of an
omission marker (summarizer.compress's head/tail cut). From a tree's root, with PYTHONPATH=TREE:

.venv/bin/python bench/results/modelshare/stop44/fragments.py
"""

from __future__ import annotations

import re
import sys
from typing import Any

sys.path.insert(0, "bench")
import nfr_offline as N

from summarizer.digest import Digest, Item, Summarizer
from watcher.eval.replay import token_counter
from watcher.eval.trajectories import load_many

FULL = re.compile(r"\[… \d+ chars omitted; recall [^\]\s]+\]")
T = N.shared_trajectories()


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
    marks = N.default_marks()
    for la in (0, 3000, 1000000):
        for strategy in ("optimistic", "recency"):
            for traj in load_many(T, count=count):
                N.play(traj, summ, marks, N.how(strategy, la))
    print(tally)


if __name__ == "__main__":
    main()
