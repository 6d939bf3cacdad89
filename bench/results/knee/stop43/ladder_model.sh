#!/usr/bin/env bash
# model-only knee ladder, 3 rounds, from /tmp/K43
set -euo pipefail
out=$1; mkdir -p "$out"; cd /tmp/K43
S=../shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
for r in 1 2 3; do
  echo "round $r model start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=/tmp/K43 .venv/bin/compactd bench load --trajectories $T --agents 200,400 --max-agents 4000 \
    --seconds 60 --seed "$r" --json "$out/model-$r.json" || true
  echo "round $r model end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
