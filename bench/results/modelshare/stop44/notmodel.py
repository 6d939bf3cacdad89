"""Why digests were not the model's, per round, from a replay daemon's log (bench/results/readahead/ab.sh).

Each ``digest_done`` is paired with its agent's last ``compaction_planned``. A digest not by the
model is put in one class: ``over_budget`` when the context was over its budget when the
compaction was planned (a single turn brought more than the budget holds: the agent's next call
needs the digest now), else its ``model_skipped`` reason (deadline, not_shown, late, busy,
too_small). Rounds are told apart by the agent's name (``#2``, ``#3``).

python3 bench/results/modelshare/stop44/notmodel.py DAEMON_LOG [BUDGET]
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter, defaultdict


def main() -> None:
    path = sys.argv[1]
    budget = int(sys.argv[2]) if len(sys.argv) > 2 else 32000
    planned: dict[str, dict[str, object]] = {}
    rounds: dict[int, Counter[str]] = defaultdict(Counter)
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for line in lines:
        if not line.startswith("{"):
            continue
        e = json.loads(line)
        agent = str(e.get("agent", ""))
        m = re.search(r"#(\d+)-\d+$", agent)
        rnd = int(m[1]) if m else 1
        if e["event"] == "compaction_planned":
            planned[agent] = e
        elif e["event"] == "digest_done":
            c = rounds[rnd]
            c["digests"] += 1
            if e.get("method") == "model":
                c["model"] += 1
                continue
            p = planned.get(agent, {})
            if int(str(p.get("tokens", 0))) > budget:
                c["not_model:over_budget"] += 1
            else:
                c[f"not_model:{e.get('model_skipped') or 'unknown'}"] += 1
    for rnd in sorted(rounds):
        c = rounds[rnd]
        over = c["not_model:over_budget"]
        share = c["model"] / c["digests"]
        rest = c["model"] / (c["digests"] - over) if c["digests"] > over else 0.0
        print(
            json.dumps(
                {
                    "round": rnd,
                    "model_share": round(share, 3),
                    "model_share_of_digests_planned_under_budget": round(rest, 3),
                    **dict(sorted(c.items())),
                }
            )
        )


if __name__ == "__main__":
    main()
