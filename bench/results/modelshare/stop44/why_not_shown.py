"""Offline: which digests the model ranks but changes nothing in (``nothing ranked was shown``), and why.

The optimistic play of bench/nfr_offline.py (deterministic digests replace each region, so the
regions are those of the rules), with each region also digested by a Summarizer with the real
model at the defaults (q4_0, scoring every time: no deadlines). For each digest: its method, the
model's reason when it added nothing, and the rules' digest's shape: how many sections were cut to
fit, how many were logs the model ranks, the target, and whether the sections were only listed.

.venv/bin/python bench/results/modelshare/stop44/why_not_shown.py LOOKAHEAD_TOKENS [--show N]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

sys.path.insert(0, "bench")
import nfr_offline as N

from summarizer.compress import rankable
from summarizer.digest import Summarizer, _facts_of
from summarizer.engine import EngineSettings, LlamaEngine
from summarizer.layout import Renderers
from watcher.eval.replay import token_counter
from watcher.eval.trajectories import load_many
from watcher.runtime.paths import default_model_path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("lookahead", type=int)
    ap.add_argument("--show", type=int, default=0, help="print this many not_shown digests")
    args = ap.parse_args()
    count = token_counter(True)
    det = Summarizer(None, count=count)
    model = Summarizer(
        LlamaEngine(EngineSettings(str(default_model_path()), weights="q4_0", flash_attn=True)), count=count
    )
    orig = det.digest
    tally: Counter[str] = Counter()
    shown: list[str] = []

    async def both(items, ref, target, **kw):  # type: ignore[no-untyped-def]
        d = await orig(items, ref, target, **kw)
        m = await model.digest(items, ref, target)
        tally["digests"] += 1
        why = "model" if m.method == "model" else m.model_skipped
        tally[why] += 1
        if why == "nothing ranked was shown":
            names, facts = _facts_of(items, target)
            rs = Renderers(ref)
            rules = det._fit(items, rs, sum(i.tokens for i in items), facts, (), target, names)
            logs = [
                it.id
                for it in items
                if it.kind != "digest" and rankable(it.text) and rs.of(it).plan is not None
            ]
            listed = "not shown (" in rules.text
            tally[
                "not_shown:listed" if listed else "not_shown:cut>0" if rules.cut else "not_shown:logs_only"
            ] += 1
            if len(shown) < args.show:
                shown.append(
                    json.dumps(
                        {
                            "target": target,
                            "sections": len(items),
                            "cut": sorted(rules.cut),
                            "logs": logs,
                            "scored": m.scored_tokens,
                            "listed": listed,
                        }
                    )
                )
        return d

    det.digest = both  # type: ignore[method-assign]
    marks, how = N.default_marks(), N.how("optimistic", args.lookahead)
    T = N.shared_trajectories()
    for t in load_many(T, count=count):
        N.play(t, det, marks, how)
    print(json.dumps({"lookahead": args.lookahead, **dict(sorted(tally.items()))}))
    for s in shown:
        print(s)


if __name__ == "__main__":
    main()
