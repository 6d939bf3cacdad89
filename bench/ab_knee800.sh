#!/bin/bash
# Side by side: the base tree (BASE_TREE, e.g. `git archive bdbdfd2 | tar x -C /tmp/base`) and this one, alternating.
cd "$(dirname "$0")/.."
S=../shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
mkdir -p bench/results/knee/ab800
for r in 1 2 3; do
  for v in main final; do
    if [ $v = main ]; then pp=${BASE_TREE:?set BASE_TREE to a git archive of the base commit}; else pp=/work/main; fi
    echo "$r $v $(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)"
    PYTHONPATH=$pp timeout 600 .venv/bin/compactd bench load --trajectories $T --no-model --agents 800 --max-agents 800 --seconds 60 --seed $r --json bench/results/knee/ab800/$v-$r.json > /dev/null 2>&1
  done
done
echo done $(date -u +%T)
