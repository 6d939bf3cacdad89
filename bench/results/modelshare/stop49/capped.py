"""Offline: the model's share of digests when its job's time buys only a few tokens of scoring.

Stop 44's why_not_shown.py plays the rules' regions (bench/nfr_offline.py's optimistic play) and
digests each region again with the real model at the defaults, with no deadline. Live, most jobs
are time-limited: the daemon passes ``model_tokens`` (what the job's time buys at the measured
prefill rate, watcher.serve.jobs) and half of the live ``not_shown`` digests read fewer than 400
tokens. This script digests each region once per cap in CAPS and tallies, per cap, the digests
that carry the model's lines and why the others do not.

From TREE's root:

    PYTHONPATH=TREE .venv/bin/python bench/results/modelshare/stop49/capped.py LOOKAHEAD CAP [CAP ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

sys.path.insert(0, "bench")
import nfr_offline as N

from summarizer.digest import Summarizer
from watcher.eval.replay import token_counter
from watcher.eval.trajectories import load_many


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("lookahead", type=int)
    ap.add_argument("caps", type=int, nargs="+", help="model_tokens of each job (0: no cap)")
    args = ap.parse_args()
    count = token_counter(True)
    det = Summarizer(None, count=count)
    model = N.model_summarizer(count)
    orig = det.digest
    tally: dict[int, Counter[str]] = {cap: Counter() for cap in args.caps}

    async def both(items, ref, target, **kw):  # type: ignore[no-untyped-def]
        d = await orig(items, ref, target, **kw)
        for cap in args.caps:
            m = await model.digest(items, ref, target, model_tokens=cap or None)
            tally[cap]["digests"] += 1
            tally[cap]["model" if m.method == "model" else m.model_skipped or "?"] += 1
            tally[cap]["scored_tokens"] += m.scored_tokens
        return d

    det.digest = both  # type: ignore[method-assign]
    marks, how = N.default_marks(), N.how("optimistic", args.lookahead)
    for t in load_many(N.shared_trajectories(), count=count):
        N.play(t, det, marks, how)
    for cap in args.caps:
        print(json.dumps({"lookahead": args.lookahead, "cap": cap, **dict(sorted(tally[cap].items()))}))


if __name__ == "__main__":
    main()
