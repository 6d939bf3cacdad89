"""Needed-fact retention and canaries offline: the planner and real deterministic digests, no daemon.

Each trajectory is played as watcher.eval.plansim plays it (plans applied at once before the agent's
LLM call, optimistic strategy, 4 fresh turns, the default watermarks), but each region is replaced
by the real deterministic digest (summarizer.digest.Summarizer without a model, the model's
tokenizer counting), and NFR (watcher.eval.nfr) is computed on what was replaced. With
``--canaries FILE`` the canaries are planted as ``compactd replay --canaries FILE --seed N`` plants
them (watcher.eval.canaries), and those whose section was compacted are counted per kind: still
verbatim in the context at the end, or lost. Seconds per trajectory: a quick check of a summarizer
change before the live replay (``compactd replay``), which also has the look-ahead, the model's
gists and real timing, so its figures differ. ``--explain`` says, for each needed identifier
lost, where it was and why the digest did not carry it: the kind of its section, the digest that
took it (sections, tokens), its rank among the region's names (summarizer.names), how many names
the digest's names line showed, and the line's size against its share of the digest
(summarizer.layout.names_share).

.venv/bin/python bench/nfr_offline.py [--canaries bench/canaries.txt] [--seed 1] [--explain] \
    [--strategy optimistic|recency] [--lookahead-tokens N] [--evidence-sigmas S] [--model] TRAJECTORY ...

``--model`` digests each region with the real model at the defaults (q4_0), scoring every time (no
deadline, no lane): what the model's digests keep when time is no object (minutes, not seconds).

``--lookahead-tokens`` plans that much before the high watermark (capped as the daemon caps it: a
large value plans as early as the daemon with a model); ``--evidence-sigmas`` sets
ScoreParams.evidence_sigmas (0: the cheapest region always). Regret (watcher.eval.regret) of the
same play is printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import re
from collections.abc import Callable

from ipc.sections import Section
from summarizer.digest import Item, Summarizer
from summarizer.layout import NAMES_LABEL, names_share
from summarizer.names import ranked_names
from watcher.config.agents import AUTO_BAND, AUTO_LOW
from watcher.eval.canaries import CANARY_KINDS, CanaryTally, load_canaries, plant, score
from watcher.eval.nfr import Retention, retention
from watcher.eval.regret import Regret, regret
from watcher.eval.replay import token_counter
from watcher.eval.trajectories import Trajectory, load_many
from watcher.planning.planner import Watermarks, plan
from watcher.planning.scoring import ScoreParams, Scorer

BUDGET, RESERVE, FRESH = 32000, 0.15, 4
_NAMES_LINE = re.compile(rf"^{re.escape(NAMES_LABEL)}(.*)$", re.M)
SHARED = "/tmp/shared/trajectories"  # ../shared/trajectories, linked where the bench scripts read it


def shared_trajectories(root: str = SHARED) -> list[str]:
    """The 12 shared trajectories' files, as bench/results/readahead/ab.sh plays them."""
    return [
        *sorted(glob.glob(f"{root}/mini-swe-agent/*.json")),
        f"{root}/openhands/output.jsonl",
        f"{root}/openhands-nunu0404/output.jsonl",
        f"{root}/swe-agent/pydicom__pydicom-1458.traj",
    ]


def model_summarizer(count: Callable[[str], int]) -> Summarizer:
    """The real model at the daemon's default weights (q4_0), for the offline plays that digest
    each region with it as well (bench/results/modelshare/...)."""
    from summarizer.engine import EngineSettings, LlamaEngine
    from watcher.runtime.paths import default_model_path

    engine = LlamaEngine(EngineSettings(str(default_model_path()), weights="q4_0", flash_attn=True))
    return Summarizer(engine, count=count)


def default_marks() -> Watermarks:
    """The replay's watermarks: budget 32 000, reserve 0.15, the automatic low watermark."""
    return Watermarks(BUDGET, RESERVE, min(AUTO_LOW, 1 - RESERVE - AUTO_BAND))


def how(strategy: str = "optimistic", lookahead_tokens: int = 0) -> argparse.Namespace:
    """A play's settings (`play`'s ``how``) as main's options give them, at the default scoring."""
    return argparse.Namespace(
        strategy=strategy, lookahead_tokens=lookahead_tokens, evidence_sigmas=ScoreParams().evidence_sigmas
    )


def play(
    traj: Trajectory,
    summ: Summarizer,
    marks: Watermarks,
    how: argparse.Namespace,
    regions: dict[str, list[Section]] | None = None,
) -> tuple[Retention, Regret, int, list[Section]]:
    """NFR, regret, the number of digests, and the context at the end; ``regions`` gets what each
    digest took."""
    ctx: list[Section] = []
    scorer = Scorer(ScoreParams(evidence_sigmas=how.evidence_sigmas))
    removed: dict[str, int] = {}
    added: dict[str, tuple[str, int]] = {}
    for k, turn in enumerate(traj.turns):
        ctx.extend(turn)
        for _ in range(8):
            p = plan(ctx, marks, FRESH, strategy=how.strategy, scorer=scorer, growth=how.lookahead_tokens)
            if p is None:
                break
            start = next(i for i, s in enumerate(ctx) if s.id == p.ids[0])
            region = ctx[start : start + len(p.ids)]
            ref = f"d{len(added) + 1}"
            items = [Item(s.id, s.kind, s.text, s.tokens) for s in region]
            d = asyncio.run(summ.digest(items, ref, p.target_tokens))
            ctx[start : start + len(p.ids)] = [Section(ref, "digest", d.text, tokens=d.tokens)]
            added[ref] = (d.text, k)
            if regions is not None:
                regions[ref] = region
            for s in region:
                removed.setdefault(s.id, k)
    return retention(traj.turns, removed, added), regret(traj.turns, removed), len(added), ctx


def explain(lost: str, regions: dict[str, list[Section]], added: dict[str, str]) -> str:
    """Where a lost ``section:identifier`` was, and what the digest that took it showed."""
    sid, name = lost.split(":", 1)
    for ref, region in regions.items():
        ids = [s.id for s in region]
        if sid not in ids:
            continue
        sec = region[ids.index(sid)]
        ranked = ranked_names([Item(s.id, s.kind, s.text, s.tokens) for s in region])
        rank = f"{ranked.index(name) + 1}/{len(ranked)}" if name in ranked else f"-/{len(ranked)}"
        text = added[ref]
        m = _NAMES_LINE.search(text)
        shown = len(m[1].split()) if m else 0
        line = f"{len(m[0]) if m else 0} of {int(names_share(len(text)) * len(text))} chars"
        size = f"{len(region)} sections, {sum(s.tokens for s in region)} tokens"
        return f"{lost} ({sec.kind}): in {ref} of {size}; rank {rank}, {shown} shown ({line})"
    return f"{lost}: in no digest"


def _kinds(t: CanaryTally) -> str:
    return " ".join(f"{k} {t.in_context[k]}/{t.compacted[k]}" for k in CANARY_KINDS if k != "user")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("trajectories", nargs="+")
    ap.add_argument("--canaries", help="plant these canaries (one sentence a line) and count them")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--strategy", choices=["optimistic", "recency"], default="optimistic")
    ap.add_argument("--lookahead-tokens", type=int, default=0)
    ap.add_argument("--evidence-sigmas", type=float, default=ScoreParams().evidence_sigmas)
    ap.add_argument("--explain", action="store_true", help="say where each lost identifier was")
    ap.add_argument("--model", action="store_true", help="digest with the model too (q4_0, no deadline)")
    args = ap.parse_args()
    count = token_counter(True)
    summ = model_summarizer(count) if args.model else Summarizer(None, count=count)
    marks = default_marks()
    sentences = load_canaries(args.canaries) if args.canaries else []
    needed = kept = regretted = compacted = 0
    pooled = CanaryTally()
    lost: list[str] = []
    why: list[str] = []
    print("trajectory | digests | needed | kept | NFR | canaries in context | first lost")
    for loaded in load_many(args.trajectories, count=count):
        traj, canaries = plant(loaded, sentences, args.seed, count) if sentences else (loaded, [])
        regions: dict[str, list[Section]] = {}
        r, g, n, ctx = play(traj, summ, marks, args, regions)
        regretted, compacted = regretted + g.regretted, compacted + g.compacted
        texts = {s.id: s.text for s in ctx if s.kind == "digest"}
        if args.explain:
            why += [f"{traj.name}: {explain(x, regions, texts)}" for x in r.lost]
        tally = score(canaries, {s.id: s for s in traj.sections}, ctx, {}, {})
        pooled.add(tally)
        lost += [f"{traj.name}: {c}" for c in tally.lost]
        needed, kept = needed + r.needed, kept + r.kept
        nfr = "–" if r.nfr is None else f"{r.nfr:.3f}"
        print(f"{traj.name} | {n} | {r.needed} | {r.kept} | {nfr} | {_kinds(tally)} | {' '.join(r.lost[:6])}")
    print(f"pooled | | {needed} | {kept} | {kept / needed if needed else 0:.3f} | {_kinds(pooled)} |")
    print(f"regret {regretted}/{compacted} = {regretted / compacted if compacted else 0:.3f}")
    for line in lost:
        print(f"canary lost: {line}")
    for line in why:
        print(f"lost: {line}")


if __name__ == "__main__":
    main()
