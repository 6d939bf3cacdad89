#!/usr/bin/env bash
set -uo pipefail
cd /tmp/K43
out=/work/main/bench/results/knee/stop43
S=../shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
mkdir -p $out/ladder $out/synthetic200
for r in 1 2 3; do
  echo "round $r synthetic start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=/tmp/K43 timeout 600 .venv/bin/compactd bench load --agents 200 --rate 5 --seconds 60 --json $out/synthetic200/model-$r.json > $out/synthetic200/model-$r.log 2>&1; echo "rc $?"
  echo "round $r nomodel start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=/tmp/K43 .venv/bin/compactd bench load --trajectories $T --no-model --agents 200,400 --max-agents 4000 \
    --seconds 60 --seed "$r" --json "$out/ladder/nomodel-$r.json"; echo "rc $?"
done
echo "done $(date -u +%T)"
