"""Offline: needed-fact retention when every digest is the model's (no deadline), one tree.

bench/nfr_offline.py's optimistic play at a look-ahead of LOOKAHEAD_TOKENS, with each region digested
by a Summarizer with the real model at the defaults (q4_0, scoring every time) instead of the
deterministic one. Prints the pooled NFR, the digests and how many are the model's, and the needed
identifiers lost. Run from a tree's root with that tree first on the path, to compare two trees:

PYTHONPATH=TREE .venv/bin/python bench/results/modelshare/stop45/nfr_model.py 3000
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

sys.path.insert(0, "bench")
import nfr_offline as N

from summarizer.digest import Summarizer
from summarizer.engine import EngineSettings, LlamaEngine
from watcher.eval.replay import token_counter
from watcher.eval.trajectories import load_many
from watcher.runtime.paths import default_model_path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("lookahead", type=int)
    args = ap.parse_args()
    count = token_counter(True)
    model = Summarizer(
        LlamaEngine(EngineSettings(str(default_model_path()), weights="q4_0", flash_attn=True)), count=count
    )
    orig = model.digest
    tally: Counter[str] = Counter()

    async def counted(items, ref, target, **kw):  # type: ignore[no-untyped-def]
        d = await orig(items, ref, target, **kw)
        tally["digests"] += 1
        tally["model" if d.method == "model" else d.model_skipped] += 1
        return d

    model.digest = counted  # type: ignore[method-assign]
    marks, how = N.default_marks(), N.how("optimistic", args.lookahead)
    T = N.shared_trajectories()
    needed = kept = 0
    lost: list[str] = []
    for t in load_many(T, count=count):
        r, _, _, _ = N.play(t, model, marks, how)
        needed, kept = needed + r.needed, kept + r.kept
        lost += [f"{t.name}: {x}" for x in r.lost]
    out = {"lookahead": args.lookahead, "needed": needed, "kept": kept, "nfr": round(kept / needed, 4)}
    print(json.dumps(out | dict(sorted(tally.items()))))
    for x in lost:
        print(f"lost: {x}")


if __name__ == "__main__":
    main()
