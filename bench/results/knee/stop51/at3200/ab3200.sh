#!/bin/bash
# Stop 51: 3 200 agents without the model, the stop-47 code (git archive 7b73681 in /tmp/K47) then main, one round each
S=/work/shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
for r in 1; do
 for tree in /tmp/K47 /work/main; do
  n=$(basename $tree)
  echo "$n round $r start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd $tree && PYTHONPATH=$tree /work/main/.venv/bin/python -m watcher bench load --trajectories $T --no-model --agents 3200 --max-agents 3200 --seconds 60 --seed $r --json /tmp/k3200/ab-$n-$r.json > /tmp/k3200/ab-$n-$r.txt 2>&1 || true)
 done
done
echo done >> /tmp/k3200/ab.done
