"""Rounds of `compactd bench load --trajectories` (bench/knee_rounds.sh) as one table and one plot:
per variant (with / without the model) and per N, the median and range over the rounds of each
figure; the knee per round. Markdown on stdout.

    .venv/bin/python bench/knee_table.py bench/results/knee/rounds [--plot docs/load-knee.png]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from watcher.eval.bench.loadagents import STALL_CAUSES

ROWS = [
    ("overflow_calls", "overflowing calls (load)"),
    ("stalled_calls", "stalled calls (load)"),
    ("stall_ms_p99", "stall p99 ms"),
    ("calls", "LLM calls"),
    ("agents_under_high_watermark", "agents under their high watermark at every call"),
    ("ingest_ms_p50", "ingest p50 ms"),
    ("ingest_ms_p99", "ingest p99 ms"),
    ("daemon_loop_lag_ms_p99", "the daemon's loop lag p99 ms (last 30 s)"),
    ("client_loop_lag_ms_p99", "the agents' process's loop lag p99 ms"),
    ("queue_wait_ms_p50", "queue wait p50 ms"),
    ("queue_wait_ms_p99", "queue wait p99 ms"),
    ("compactions_per_s", "compactions/s"),
    ("tokens_compacted_per_s", "tokens compacted/s"),
    ("degraded_digests", "degraded digests (masking + head/tail)"),
    ("model_jobs", "model jobs"),
    ("model_share_of_digests", "model share of applied digests"),
    ("daemon_cpu_pct_mean", "daemon + worker CPU % (of one core)"),
    ("rss_mb_max", "RSS max MB (daemon + worker, summed)"),
    ("pss_mb_max", "PSS max MB (daemon + worker, each page once)"),
    ("loadavg_start", "load average at the step's start"),
    ("steal_pct_mean", "CPU time the host took (steal), mean % (since stop 53)"),
    ("steal_pct_max", "... max % of a second"),
]
CAUSED = "stalled_calls_by_cause"


def load(folder: Path) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    for f in sorted(folder.glob("*.json")):
        variant = f.stem.rsplit("-", 1)[0]
        runs.setdefault(variant, []).append(json.loads(f.read_text()))
    return runs


def spread(xs: list[float]) -> str:
    if not xs:
        return "–"
    med = statistics.median(xs)
    lo, hi = min(xs), max(xs)
    fmt = (lambda v: f"{v:.3g}") if max(abs(lo), abs(hi)) < 10 else (lambda v: f"{v:,.0f}")
    return fmt(med) if lo == hi else f"{fmt(med)} ({fmt(lo)}–{fmt(hi)})"


def by_n(rounds: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    steps: dict[int, list[dict[str, Any]]] = {}
    for r in rounds:
        for s in r["steps"]:
            steps.setdefault(s["agents"], []).append(s)
    return steps


def table(variant: str, rounds: list[dict[str, Any]]) -> str:
    steps = by_n(rounds)
    ns = sorted(steps)
    knees = [r["knee_agents"] for r in rounds]
    head = f"| {variant}: median (range) over rounds | " + " | ".join(
        f"{n} agents ({len(steps[n])} rounds)" for n in ns
    )
    out = [head + " |", "|---" * (len(ns) + 1) + "|"]
    for key, label in ROWS:
        cells = [spread([s[key] for s in steps[n] if s.get(key) is not None]) for n in ns]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
        if key == "stalled_calls":  # ... and what made them (steps from 55eb357 on)
            for cause in STALL_CAUSES:
                got = [[float(s[CAUSED][cause]) for s in steps[n] if CAUSED in s] for n in ns]
                out.append(f"| ... {cause} | " + " | ".join(spread(g) for g in got) + " |")
    missed = sorted({m for r in rounds for m in r["missed"]})
    out.append("")
    median = statistics.median(knees)
    out.append(f"knee per round: {knees} (median {median:g}); goals missed in any round: {missed}")
    return "\n".join(out)


def plot(runs: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("overflow_calls", "overflowing calls"),
        ("stalled_calls", "stalled calls (load)"),
        ("queue_wait_ms_p50", "queue wait p50 (ms)"),
        ("queue_wait_ms_p99", "queue wait p99 (ms)"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.4))
    colors = {"nomodel": "#1f77b4", "model": "#d62728"}
    for ax, (key, title) in zip(axes, panels, strict=True):
        for variant, rounds in sorted(runs.items()):
            steps = by_n(rounds)
            ns = sorted(steps)
            vals = [[float(s[key] or 0) for s in steps[n]] for n in ns]
            med = [statistics.median(v) for v in vals]
            lo = [m - min(v) for m, v in zip(med, vals, strict=True)]
            hi = [max(v) - m for m, v in zip(med, vals, strict=True)]
            label = "without the model" if variant == "nomodel" else "with the model"
            ax.errorbar(ns, med, yerr=[lo, hi], marker="o", capsize=3, label=label, color=colors.get(variant))
            knee = statistics.median(r["knee_agents"] for r in rounds)
            ax.axvline(knee, color=colors.get(variant), linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("agents (a turn every 2-10 s each)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("compactd, 2 cores: median and range over rounds; dotted: median knee", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--plot", type=Path)
    a = ap.parse_args()
    runs = load(a.folder)
    for variant in sorted(runs, reverse=True):
        print(table(variant, runs[variant]))
        print()
    if a.plot:
        plot(runs, a.plot)


if __name__ == "__main__":
    main()
