#!/bin/bash
# The replay at the defaults, /tmp/base29 (7750999) and /tmp/ctx1024 (the same with model.n_ctx = 1024 by default), alternating.
# ROUNDS="1 2" for two rounds; each tree needs a .venv symlink to the project's.
S=/work/shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
out=/work/main/bench/results/memory/stop29/replay
for r in ${ROUNDS:-1}; do
for v in base29 ctx1024; do
  echo "$r $v $(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)"
  (cd /tmp/$v && PYTHONPATH=/tmp/$v timeout 1200 /work/main/.venv/bin/compactd replay $T --budget 32000 --reserve 0.15 --turn-interval 2 --policy optimistic --canaries /work/main/bench/canaries.txt --seed 1 --jobs 4 --json $out/$v-$r.json > $out/$v-$r.log 2>&1)
done
done
echo done $(date -u +%T)
