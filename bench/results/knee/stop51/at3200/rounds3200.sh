#!/bin/bash
# Stop 51: 3 rounds of 3 200 agents without the model, main (run from /work/main; JSON in /tmp/k3200, copied here)
cd /work/main
S=../shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
for r in 1 2 3; do
  echo "round $r start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  .venv/bin/compactd bench load --trajectories $T --no-model --agents 3200 --max-agents 3200 --seconds 60 --seed $r --json /tmp/k3200/nomodel-$r.json > /tmp/k3200/out-$r.txt 2>&1 || true
  echo "round $r end $(date -u +%H:%M:%S)"
done
echo done > /tmp/k3200/done
