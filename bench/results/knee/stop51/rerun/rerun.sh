#!/usr/bin/env bash
# Stop 51: the model's round 3 of the knee again (seed 3), with the machine's steal time sampled
# every 5 s (/proc/stat's 8th field of the `cpu` line: ticks the hypervisor gave to others).
# Usage: bench/results/knee/stop51/rerun/rerun.sh OUTDIR   (from the repository root)
set -euo pipefail
out=${1:?usage: rerun.sh OUTDIR}
mkdir -p "$out"
S=../shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
( while true; do echo "$(date -u +%H:%M:%S) $(head -1 /proc/stat)"; sleep 5; done ) > "$out/stat.txt" &
sampler=$!
# shellcheck disable=SC2086  # T is a list of globs
.venv/bin/compactd bench load --trajectories $T --agents 200,400 --max-agents 4000 --seconds 60 --seed 3 \
  --json "$out/model-3.json" 2>&1 | while IFS= read -r line; do echo "$(date -u +%H:%M:%S) $line"; done > "$out/model-3.txt" || true
kill $sampler
