"""Plot a replay: context usage over turns for each policy, watermarks, compactions and stalls.

    compactd replay TRAJ... --policy optimistic,reactive,masking --plot replay.png
    python -m watcher.eval.plot replay.json replay.png        # again, from the JSON of a replay

One panel per trajectory. Each policy is a line (usage at each LLM call, as a fraction of the
budget); dashed and dotted lines are the high and low watermarks; a small triangle marks a
compaction the agent applied before that call; a red cross marks a call the agent had to wait for
(bigger = longer); an upward triangle marks a call that did not fit the budget even after waiting
(an overflow; usage above the top of a panel is drawn at its edge).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a display

import matplotlib.pyplot as plt  # after choosing the backend
from matplotlib.lines import Line2D

COLORS = {"optimistic": "#1f77b4", "reactive": "#d62728", "masking": "#2ca02c", "recency": "#9467bd"}
Y_TOP = 1.25  # usage above 125 % of the budget is drawn at the edge


class PlotError(ValueError):
    pass


def plot(result: dict[str, Any], path: str | Path) -> Path:
    """Draw ``result`` (what ``run_replay`` returns) to a PNG at ``path``."""
    series: dict[str, dict[str, Any]] = result.get("series") or {}
    if not series:
        raise PlotError("the replay result has no per-turn series to plot")
    settings = result.get("settings", {})
    budget = int(settings.get("budget") or 0)
    order = ["reactive", "masking", "recency", "optimistic"]  # the product is drawn last, on top
    policies = sorted(series, key=lambda p: order.index(p) if p in order else -1)
    names: list[str] = []
    for per in series.values():
        names += [n for n in per if n not in names]
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    width = max(10.5, 5.2 * cols)
    height = 3.1 * rows + 1.2
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False)
    for k, name in enumerate(names):
        ax = axes[k // cols][k % cols]
        _panel(ax, name, {p: series[p][name] for p in policies if name in series[p]}, budget)
    for k in range(len(names), rows * cols):
        axes[k // cols][k % cols].axis("off")
    handles = [Line2D([], [], color=COLORS.get(p, "black"), lw=1.6, label=p) for p in reversed(policies)]
    handles += [
        Line2D([], [], color="grey", ls="--", lw=1, label="high watermark"),
        Line2D([], [], color="grey", ls=":", lw=1, label="low watermark"),
        Line2D([], [], color="black", marker="v", ls="", ms=5, label="compaction applied"),
        Line2D([], [], color="red", marker="x", ls="", ms=7, label="agent waited (size = wait)"),
        Line2D([], [], color="black", marker="^", ls="", ms=5, label="did not fit (overflow)"),
    ]
    fig.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 1 - 0.4 / height),
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    title = (
        f"compactd replay: context usage at each LLM call, as a share of the budget ({budget} tokens, "
        f"reserve {settings.get('reserve')}, {settings.get('turn_interval')} s per turn)"
    )
    fig.suptitle(title, fontsize=10, y=1 - 0.1 / height)
    fig.tight_layout(rect=(0, 0, 1, 1 - 1.1 / height))
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _panel(ax: Any, name: str, per_policy: dict[str, dict[str, Any]], budget: int) -> None:
    marks_drawn = False
    for policy, s in per_policy.items():
        usage = [u / budget for u in s.get("usage", [])] if budget else []
        if not usage:
            continue
        color = COLORS.get(policy, "black")
        xs = list(range(len(usage)))
        ax.plot(xs, [min(u, Y_TOP) for u in usage], color=color, lw=1.2, alpha=0.9)
        over = [x for x in xs if usage[x] > 1.0]  # the call did not fit: an overflow
        if over:
            ax.plot(over, [min(usage[x], Y_TOP) for x in over], ls="", marker="^", color=color, ms=4)
        calls = [c for c, _ in s.get("compactions", []) if 0 <= c < len(usage)]
        if calls:
            ax.plot(calls, [min(usage[c], Y_TOP) for c in calls], ls="", marker="v", color=color, ms=4)
        stalls = [
            (x, ms)
            for x, ms in enumerate(s.get("stalls_ms", []))
            if ms > 0 and x < len(usage) and usage[x] <= 1.0  # waits that ended with room
        ]
        if stalls:
            ax.scatter(
                [x for x, _ in stalls],
                [min(usage[x], Y_TOP) for x, _ in stalls],
                s=[min(200.0, 12 + ms / 50) for _, ms in stalls],
                marker="x",
                color="red",
                linewidths=1.2,
                zorder=5,
            )
        if not marks_drawn and budget:
            high, low = s.get("high_watermark"), s.get("low_watermark")
            if high:
                ax.axhline(high / budget, color="grey", ls="--", lw=0.9)
            if low:
                ax.axhline(low / budget, color="grey", ls=":", lw=0.9)
            ax.axhline(1.0, color="black", lw=0.6, alpha=0.5)
            marks_drawn = True
    ax.set_title(name, fontsize=9)
    ax.set_ylim(0, Y_TOP + 0.05)
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.tick_params(labelsize=7)
    ax.set_xlabel("LLM call", fontsize=7)
    ax.grid(alpha=0.2)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m watcher.eval.plot REPLAY.json OUT.png", file=sys.stderr)
        return 2
    try:
        result = json.loads(Path(args[0]).read_text(encoding="utf-8"))
        plot(result, args[1])
    except (OSError, ValueError) as exc:
        print(f"watcher.eval.plot: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
