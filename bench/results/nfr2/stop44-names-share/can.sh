#!/usr/bin/env bash
cd "$1"
T="/tmp/shared/trajectories/mini-swe-agent/*.json /tmp/shared/trajectories/openhands/output.jsonl /tmp/shared/trajectories/openhands-nunu0404/output.jsonl /tmp/shared/trajectories/swe-agent/pydicom__pydicom-1458.traj"
run() { echo "$2 $1 $(/work/main/.venv/bin/python bench/nfr_offline.py --canaries bench/canaries.txt --seed 1 --strategy $2 --lookahead-tokens $1 $T 2>&1 | grep -E '^pooled' | cut -d'|' -f3-6) lostcan=$(/work/main/.venv/bin/python bench/nfr_offline.py --canaries bench/canaries.txt --seed 1 --strategy $2 --lookahead-tokens $1 $T 2>&1 | grep -c '^canary lost')"; }
for la in 0 3000 1000000; do
  run $la optimistic & run $la recency & wait
done
