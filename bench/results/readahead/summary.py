"""Issue 15's figures per arm and round from bench/results/readahead/ab.sh's OUT directory: from the
replay JSON (per round: regret of optimistic and recency and their ratio, NFR, stalls, overflows,
canaries) and from the optimistic daemon's own log (each digest once, by ``digest_done``, split into
rounds by the replay's agent names: ``name``, ``name#2``, ``name#3``): digests, the model's share,
why the rest were not the model's, and the digests ranked from reads ahead; and the daemon's
reading over its life (its ``stopping`` log line).

python3 bench/results/readahead/summary.py OUT [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/
from share_report import events  # one reader of the daemon's log events


def round_of(agent: str) -> int:
    """The replay names agent k of round r ``replay-POLICY-NAME#r-PID`` (round 1: no ``#r``)."""
    found = re.search(r"#(\d+)-\d+$", agent)
    return int(found.group(1)) if found else 1


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})" if xs else "-"


def arm(out: Path, name: str) -> dict[str, Any]:
    data = json.loads((out / f"replay-{name}.json").read_text())
    rounds = data.get("rounds") or [{p: v["aggregate"] for p, v in data["policies"].items()}]
    log = str(out / f"daemon-{name}-optimistic.log")
    done = events(log, "digest_done")
    st = data["settings"]
    high = int(st["budget"] * (1 - st["reserve"]))
    jumped = over_high_at_plan(log, high)
    for n, d in enumerate(done):
        d["_jumped"] = n in jumped
    per: list[dict[str, Any]] = []
    for r, agg in enumerate(rounds, 1):
        opt = agg["optimistic"]
        rec = agg.get("recency") or {  # an optimistic-only run (POLICIES=optimistic)
            "regret": 0.0,
            "needed_fact_retention": None,
            "stall_ms_p99": None,
            "overflow_turns": None,
            "turns_over_high_watermark": None,
        }
        mine = [d for d in done if round_of(str(d.get("agent", ""))) == r]
        model = sum(1 for d in mine if d["method"] == "model")
        reasons = Counter(d["model_skipped"] or "-" for d in mine if d["method"] != "model")
        per.append(
            {
                "round": r,
                "regret_optimistic": opt["regret"],
                "regret_recency": rec["regret"],
                "ratio": round(opt["regret"] / rec["regret"], 3) if rec["regret"] else None,
                "nfr_optimistic": opt["needed_fact_retention"],
                "nfr_recency": rec["needed_fact_retention"],
                "stall_ms_p99": [opt["stall_ms_p99"], rec["stall_ms_p99"]],
                "overflow_turns": [opt["overflow_turns"], rec["overflow_turns"]],
                "over_high": [opt["turns_over_high_watermark"], rec["turns_over_high_watermark"]],
                "canaries_opt": opt["canaries"],
                "digests": len(mine),
                "model": model,
                "model_share": round(model / len(mine), 3) if mine else None,
                "ranked_ahead_digests": sum(1 for d in mine if d.get("ranked_ahead", 0) > 0),
                "model_without_model_job": sum(
                    1 for d in mine if d["method"] == "model" and not d["used_model"]
                ),
                "model_jobs": sum(1 for d in mine if d["used_model"]),
                "over_high_at_plan": sum(1 for d in mine if d["_jumped"]),
                "not_model_over_high_at_plan": sum(d["_jumped"] and d["method"] != "model" for d in mine),
                "not_model": dict(reasons.most_common()),
                "json_model_share": opt["digest_methods"]["model_share"],
            }
        )
    return {"rounds": per, "read_ahead": reading(log)}


def over_high_at_plan(log: str, high: int) -> set[int]:
    """Which ``digest_done`` events (n: the n-th in the log) belong to compactions planned with the
    context already over the high watermark: a turn jumped past it (a huge tool output), so no
    model time was left. Each digest is paired with its agent's last ``compaction_planned`` before
    it (one job per agent at a time)."""
    last: dict[str, int] = {}
    out: set[int] = set()
    n = 0
    with open(log, errors="replace") as f:
        for line in f:
            if '"event": "compaction_planned"' in line or '"event": "digest_done"' in line:
                try:
                    d = json.loads(line)
                except json.JSONDecodeError:
                    continue
                agent = str(d.get("agent", ""))
                if d["event"] == "compaction_planned":
                    last[agent] = int(d.get("tokens", 0))
                else:
                    if last.get(agent, 0) > high:
                        out.add(n)
                    n += 1
    return out


def reading(log: str) -> dict[str, Any] | None:
    """The daemon's read-ahead over its whole life (its ``stopping`` line, all rounds), and the
    share of the wall time, from ``ready`` to ``stopping``, that the model spent reading."""
    ready, stopping = events(log, "ready"), events(log, "stopping")
    if not ready or not stopping or "read_ahead" not in stopping[-1]:
        return None
    totals = dict(stopping[-1]["read_ahead"])
    wall = (stamp(stopping[-1]) - stamp(ready[0])).total_seconds()
    totals["wall_s"] = round(wall, 1)
    totals["reading_share"] = round(totals["seconds"] / wall, 3) if wall > 0 else None
    return totals


def stamp(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("out")
    ap.add_argument("--json")
    args = ap.parse_args()
    out = Path(args.out)
    names = sorted(p.name[len("replay-") : -len(".json")] for p in out.glob("replay-*.json"))
    result = {n: arm(out, n) for n in names}
    for n, a in result.items():
        rs = a["rounds"]
        print(f"== {n}")
        for r in rs:
            print(json.dumps(r))
        keys = ("ratio", "model_share", "nfr_optimistic", "nfr_recency", "regret_optimistic")
        for key in keys:
            print(f"  {key}: {med([r[key] for r in rs if r[key] is not None])}")
        print(f"  read_ahead: {a['read_ahead']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
