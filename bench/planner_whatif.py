"""Why the planner's choice of region is hard to judge: two offline analyses (docs/BENCHMARKS.md,
"Relevance that beats recency, held out").

``auc``: at every turn of every trajectory (nothing folded), each foldable section is labelled
"regretted if folded now" (an identifier only it holds is named by the agent in a later turn
before another section holds it again); reported is the AUC with which the section's value ranks
that label, and with which its youth does.

``whatif``: the trajectories are played as watcher.eval.plansim plays them (optimistic), and for
every plan with more than one candidate region the whole trajectory is played again with only that
plan's choice changed to each other candidate; printed is the final regret of each (regretted /
compacted sections), the chosen one marked.

.venv/bin/python bench/planner_whatif.py auc|whatif [--lookahead-tokens N] TRAJECTORY ...
"""

from __future__ import annotations

import argparse
import bisect
from collections.abc import Iterator

from ipc.sections import Section
from watcher.eval.regret import regret
from watcher.eval.replay import token_counter
from watcher.eval.trajectories import Trajectory, load_many
from watcher.planning import planner as P
from watcher.planning.identifiers import identifiers
from watcher.planning.relevance import STEP_KINDS
from watcher.planning.scoring import Scorer, turn_ages

MARKS = P.Watermarks(32000, 0.15, 0.7)
FRESH = 4


def labelled(t: Trajectory) -> Iterator[tuple[list[Section], dict[int, bool]]]:
    ids = {s.id: identifiers(s.text) for s in t.sections}
    refs = [frozenset().union(*(ids[s.id] for s in turn if s.kind in STEP_KINDS)) for turn in t.turns]
    ctx: list[Section] = []
    for k, turn in enumerate(t.turns[:-1]):
        ctx.extend(turn)
        anchors = P.anchor_mask(ctx, FRESH, P.oversize_limit(MARKS))
        count: dict[str, int] = {}
        for s in ctx:
            for x in ids[s.id]:
                count[x] = count.get(x, 0) + 1
        labels: dict[int, bool] = {}
        for i, s in enumerate(ctx):
            if anchors[i]:
                continue
            only = {x for x in ids[s.id] if count[x] == 1}
            held: set[str] = set()
            hit = False
            for u in range(k + 1, len(t.turns)):
                if (only & refs[u]) - held:
                    hit = True
                    break
                for later in t.turns[u]:
                    held |= ids[later.id] & only
            labels[i] = hit
        yield list(ctx), labels


def auc(pairs: list[tuple[float, bool]]) -> float | None:
    pos = [s for s, hit in pairs if hit]
    neg = sorted(s for s, hit in pairs if not hit)
    if not pos or not neg:
        return None
    won = sum(
        bisect.bisect_left(neg, p) + 0.5 * (bisect.bisect_right(neg, p) - bisect.bisect_left(neg, p))
        for p in pos
    )
    return won / (len(pos) * len(neg))


def run_auc(trajs: list[Trajectory]) -> None:
    value: list[tuple[float, bool]] = []
    youth: list[tuple[float, bool]] = []
    for t in trajs:
        scorer = Scorer()
        for ctx, labels in labelled(t):
            v = scorer.valuation(ctx)
            ages = turn_ages(ctx)
            for i, hit in labels.items():
                value.append((v.section(i), hit))
                youth.append((-ages[i], hit))
    print(f"sections {len(value)}, regretted if folded {sum(h for _, h in value)}")
    print(f"AUC value {auc(value):.3f}, youth {auc(youth):.3f}")


def play(
    t: Trajectory, growth: int, change: tuple[int, int] | None = None
) -> tuple[tuple[int, int], list[int]]:
    """(regretted, compacted) of the play, and per plan the number of candidate regions; ``change``
    = (plan number, candidate index) plays that plan's candidate instead of the planner's choice."""
    ctx: list[Section] = []
    scorer = Scorer()
    removed: dict[str, int] = {}
    cands: list[tuple[int, int]] = []
    for k, turn in enumerate(t.turns):
        ctx.extend(turn)
        for _ in range(8):
            p = P.plan(ctx, MARKS, FRESH, scorer=scorer, growth=growth)
            if p is None:
                break
            i = next(n for n, s in enumerate(ctx) if s.id == p.ids[0])
            j = i + len(p.ids)
            total = sum(s.tokens for s in ctx)
            need = total + P.early_by(MARKS, growth) - MARKS.low
            meeting = sorted(
                P._windows(ctx, P.anchor_mask(ctx, FRESH, P.oversize_limit(MARKS)), MARKS, need).meeting
            )
            chosen = meeting.index((i, j)) if (i, j) in meeting else -1
            if change is not None and change[0] == len(cands):
                i, j = meeting[change[1]]
            cands.append((len(meeting), chosen))
            tokens = sum(s.tokens for s in ctx[i:j])
            for s in ctx[i:j]:
                removed.setdefault(s.id, k)
            ctx[i:j] = [Section(f"d{len(cands)}", "digest", "", tokens=P.digest_target(tokens, MARKS.budget))]
    r = regret(t.turns, removed)
    return (r.regretted, r.compacted), cands


def run_whatif(trajs: list[Trajectory], growth: int) -> None:
    for t in trajs:
        base, cands = play(t, growth)
        print(f"{t.name}: {base[0]}/{base[1]} as played")
        for n, (c, chosen) in enumerate(cands):
            if c > 1:
                outs = [play(t, growth, (n, m))[0] for m in range(c)]
                shown = " ".join(f"{'*' if m == chosen else ''}{o[0]}/{o[1]}" for m, o in enumerate(outs))
                print(f"{t.name} plan {n}: {shown}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["auc", "whatif"])
    ap.add_argument("trajectories", nargs="+")
    ap.add_argument("--lookahead-tokens", type=int, default=10**6)
    a = ap.parse_args()
    trajs = load_many(a.trajectories, count=token_counter(True))
    if a.what == "auc":
        run_auc(trajs)
    else:
        run_whatif(trajs, a.lookahead_tokens)


if __name__ == "__main__":
    main()
