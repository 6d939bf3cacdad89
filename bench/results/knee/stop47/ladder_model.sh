#!/usr/bin/env bash
# The knee with the model (or without: NOMODEL=1), 3 rounds (seed = round), from a git archive of the tree under test.
# Usage: bench/results/knee/stop47/ladder_model.sh TREE OUTDIR   (TREE has .venv linked; ~15 min)
set -euo pipefail
tree=$1; out=$2; mkdir -p "$out"; cd "$tree"
S=../shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
for r in 1 2 3; do
  echo "round $r ${NOMODEL:+no}model start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  # shellcheck disable=SC2086  # T is a list of globs
  PYTHONPATH=$tree .venv/bin/compactd bench load --trajectories $T --agents 200,400 --max-agents 4000 \
    --seconds 60 --seed "$r" ${NOMODEL:+--no-model} --json "$out/${NOMODEL:+no}model-$r.json" || true   # exit 1 = a goal missed; in the JSON
  echo "round $r ${NOMODEL:+no}model end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
