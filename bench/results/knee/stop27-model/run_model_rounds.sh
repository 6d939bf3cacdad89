#!/bin/bash
# model-only knee rounds (bench/knee_rounds.sh's model variant), seed = round
cd /tmp/knee27
S=/work/shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
out=/tmp/knee27/out; mkdir -p $out
for r in 1 2 3; do
  echo "round $r model start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=/tmp/knee27 .venv/bin/compactd bench load --trajectories $T --agents 200,400 --max-agents 2000 \
      --seconds 60 --seed "$r" --json "$out/model-$r.json" > $out/model-$r.log 2>&1
  echo "round $r model end $(date -u +%H:%M:%S) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)"
done
