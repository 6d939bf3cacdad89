"""The model's share of digests and what they keep, offline: bench/nfr_offline.py's play with the
real model ranking lines (no daemon, no timing: every job gets its whole scoring budget, or the
budget given).

Each trajectory is played as bench/nfr_offline.py plays it (plans applied at once before the
agent's LLM call, optimistic, 4 fresh turns, the default watermarks, the canaries planted as
``compactd replay --canaries FILE --seed N`` plants them); each region is digested by
summarizer.digest.Summarizer with the real model at the daemon's weights (``q4_0``). Per run: digests
by method, the share whose digest shows a line only the model's ranking chose (``Digest.method ==
"model"``, the strict figure: lines the rules alone would not have shown) and the share that shows any
line the ranking chose (``ranked_lines``), NFR (watcher.eval.nfr), canaries kept in context, and the
scoring prefill's tokens and seconds per digest.

.venv/bin/python bench/share_offline.py --ranking all|logs|none [--score-tokens N] [--gists] \
    [--canaries bench/canaries.txt] [--seed 1] [--json F] TRAJECTORY ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from ipc.sections import Section
from summarizer.digest import Item, Summarizer
from summarizer.engine import EngineSettings, LlamaEngine
from summarizer.frame import unquoted
from watcher.config.agents import AUTO_BAND, AUTO_LOW
from watcher.eval.canaries import CanaryTally, load_canaries, plant, score
from watcher.eval.nfr import retention
from watcher.eval.replay import token_counter
from watcher.eval.trajectories import Trajectory, load_many
from watcher.planning.planner import Watermarks, plan
from watcher.planning.scoring import Scorer
from watcher.runtime.paths import default_model_path

BUDGET, RESERVE, FRESH = 32000, 0.15, 4


async def play(
    traj: Trajectory, summ: Summarizer, marks: Watermarks, rows: list[dict[str, Any]]
) -> tuple[Any, list[Section]]:
    ctx: list[Section] = []
    scorer = Scorer()
    removed: dict[str, int] = {}
    added: dict[str, tuple[str, int]] = {}
    for k, turn in enumerate(traj.turns):
        ctx.extend(turn)
        for _ in range(8):
            p = plan(ctx, marks, FRESH, strategy="optimistic", scorer=scorer)
            if p is None:
                break
            start = next(i for i, s in enumerate(ctx) if s.id == p.ids[0])
            region = ctx[start : start + len(p.ids)]
            ref = f"d{len(added) + 1}"
            items = [Item(s.id, s.kind, s.text, s.tokens) for s in region]
            t0 = time.perf_counter()
            d = await summ.digest(items, ref, p.target_tokens)
            seconds = time.perf_counter() - t0
            bad = unquoted(d.text, items, d.gists)
            rows.append(
                {
                    "trajectory": traj.name,
                    "method": d.method,
                    "model_lines": d.model_lines,
                    "ranked_lines": d.ranked_lines,
                    "scored_tokens": d.scored_tokens,
                    "seconds": round(seconds, 3),
                    "skipped": d.model_skipped,
                    "tokens": d.tokens,
                    "tokens_before": d.tokens_before,
                    "target": p.target_tokens,
                    "gists": len(d.gists),
                    "gists_tried": len(d.generations),
                    "unquoted": len(bad),
                    "unquoted_lines": bad[:3],
                }
            )
            ctx[start : start + len(p.ids)] = [Section(ref, "digest", d.text, tokens=d.tokens)]
            added[ref] = (d.text, k)
            for s in region:
                removed.setdefault(s.id, k)
    return retention(traj.turns, removed, added), ctx


async def run(args: argparse.Namespace) -> dict[str, Any]:
    count = token_counter(True)
    engine = None
    if args.ranking != "none":
        engine = LlamaEngine(EngineSettings(default_model_path(), weights="q4_0"))
    ranking = "all" if args.ranking == "none" else args.ranking
    summ = Summarizer(
        engine, count=count, score_max_tokens=args.score_tokens, gists=args.gists, ranking=ranking
    )
    marks = Watermarks(BUDGET, RESERVE, min(AUTO_LOW, 1 - RESERVE - AUTO_BAND))
    sentences = load_canaries(args.canaries) if args.canaries else []
    rows: list[dict[str, Any]] = []
    needed = kept = 0
    pooled = CanaryTally()
    for loaded in load_many(args.trajectories, count=count):
        traj, canaries = plant(loaded, sentences, args.seed, count) if sentences else (loaded, [])
        r, ctx = await play(traj, summ, marks, rows)
        pooled.add(score(canaries, {s.id: s for s in traj.sections}, ctx, {}, {}))
        needed, kept = needed + r.needed, kept + r.kept
        print(f"{traj.name}: NFR {r.kept}/{r.needed}", flush=True)
    if engine is not None:
        engine.close()
    n = len(rows)
    scored = [r for r in rows if r["scored_tokens"]]
    out = {
        "ranking": args.ranking,
        "score_tokens": args.score_tokens,
        "gists": args.gists,
        "digests": n,
        "methods": {m: sum(1 for r in rows if r["method"] == m) for m in ("model", "deterministic")},
        "model_share": round(sum(1 for r in rows if r["method"] == "model") / n, 4) if n else None,
        "ranked_share": round(sum(1 for r in rows if r["ranked_lines"]) / n, 4) if n else None,
        "skipped": {
            k: sum(1 for r in rows if r["skipped"] == k) for k in sorted({r["skipped"] for r in rows})
        },
        "nfr": round(kept / needed, 4) if needed else None,
        "needed": needed,
        "kept": kept,
        "canaries_in_context": sum(pooled.in_context.values()),
        "canaries_compacted": sum(pooled.compacted.values()),
        "scored_tokens_median": statistics.median([r["scored_tokens"] for r in scored]) if scored else 0,
        "seconds_median": statistics.median([r["seconds"] for r in rows]) if rows else 0,
        "seconds_scored_median": statistics.median([r["seconds"] for r in scored]) if scored else 0,
        "unquoted_lines": sum(r["unquoted"] for r in rows),
        "gists_accepted": sum(r["gists"] for r in rows),
        "gists_tried": sum(r["gists_tried"] for r in rows),
        "digests_with_a_gist": sum(1 for r in rows if r["gists"]),
        "rows": rows,
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("trajectories", nargs="+")
    ap.add_argument("--ranking", choices=["all", "logs", "none"], default="all")
    ap.add_argument("--score-tokens", type=int, default=2048)
    ap.add_argument("--gists", action="store_true")
    ap.add_argument("--canaries")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    out = asyncio.run(run(args))
    summary = {k: v for k, v in out.items() if k != "rows"}
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
