"""Plot the knee of `compactd bench load --trajectories`: overflowing calls, stalls and queue wait
against the number of agents (one panel each, the knee marked).

    compactd bench load --trajectories TRAJ... --json load.json --plot load-knee.png
    python -m watcher.eval.bench.loadplot load.json load-knee.png      # again, from the JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a display

import matplotlib.pyplot as plt  # after choosing the backend


def plot_knee(result: dict[str, Any], path: str | Path) -> Path:
    steps = sorted(result.get("steps") or [], key=lambda r: r["agents"])
    if not steps:
        raise ValueError("the load result has no steps to plot")
    n = [r["agents"] for r in steps]
    knee = int(result.get("knee_agents") or 0)
    load, big = "load", "oversized turn (not load)"
    panels = [
        (
            "overflowing calls",
            [("overflow_calls", load, "#d62728"), ("overflow_calls_oversized_turn", big, "#ff9896")],
        ),
        (
            "stalled calls",
            [("stalled_calls", load, "#1f77b4"), ("stalled_calls_oversized_turn", big, "#aec7e8")],
        ),
        ("stall (ms, load)", [("stall_ms_p99", "p99", "#9467bd"), ("stall_ms_max", "max", "#c5b0d5")]),
        (
            "compaction queue wait (ms)",
            [("queue_wait_ms_p50", "p50", "#2ca02c"), ("queue_wait_ms_p99", "p99", "#98df8a")],
        ),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(16, 3.8))
    for ax, (title, series) in zip(axes, panels, strict=True):
        for key, label, color in series:
            ax.plot(n, [r.get(key) or 0 for r in steps], marker="o", color=color, label=label)
        if knee:
            ax.axvline(knee, color="grey", ls="--", lw=1, label=f"knee {knee}")
        ax.set_ylim(bottom=0, top=max(1.0, ax.get_ylim()[1]))
        ax.set_xscale("log")
        ax.set_xticks(n, [str(x) for x in n])
        ax.minorticks_off()
        ax.set_xlabel("agents")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    s = result.get("settings", {})
    model = "with the model" if s.get("model") else "without the model"
    lo, hi = s.get("turn_interval_s") or ("?", "?")
    fig.suptitle(
        f"compactd bench load: agents replaying real trajectories, a turn every {lo}-{hi} s, "
        f"budget {s.get('budget')}, {s.get('seconds')} s per step, {model}",
        fontsize=10,
    )
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m watcher.eval.bench.loadplot LOAD.json OUT.png", file=sys.stderr)
        return 2
    plot_knee(json.loads(Path(args[0]).read_text(encoding="utf-8")), args[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
