#!/usr/bin/env bash
# NFR offline with canaries planted (seed 1) over 3 look-aheads x 2 strategies, in tree $1: the pooled
# needed | kept | NFR | canaries in context, and how many canaries were lost
cd "$1"
T="/tmp/shared/trajectories/mini-swe-agent/*.json /tmp/shared/trajectories/openhands/output.jsonl /tmp/shared/trajectories/openhands-nunu0404/output.jsonl /tmp/shared/trajectories/swe-agent/pydicom__pydicom-1458.traj"
run() {
  local out
  # shellcheck disable=SC2086  # T is a list of globs
  out=$(/work/main/.venv/bin/python bench/nfr_offline.py --canaries bench/canaries.txt --seed 1 --strategy "$2" --lookahead-tokens "$1" $T 2>&1)
  echo "$2 $1 $(grep -E '^pooled' <<< "$out" | cut -d'|' -f3-6) lostcan=$(grep -c '^canary lost' <<< "$out")"
}
for la in 0 3000 1000000; do
  run $la optimistic & run $la recency & wait
done
