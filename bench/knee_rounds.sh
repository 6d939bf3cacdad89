#!/usr/bin/env bash
# The capacity knee (issue 17), three interleaved rounds: without the model, then with it, per round.
# Usage: bench/knee_rounds.sh OUTDIR [ROUNDS]   (from the repository root; ~45 min on 2 idle cores)
# VARIANTS="model" (or "nomodel") runs one variant only; LADDER_MODEL / LADDER_NOMODEL set the ladders.
set -euo pipefail
out=${1:?usage: bench/knee_rounds.sh OUTDIR [ROUNDS]}
rounds=${2:-3}
mkdir -p "$out"
S=../shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
for r in $(seq 1 "$rounds"); do
  for variant in ${VARIANTS:-nomodel model}; do
    flag=""; ladder=${LADDER_MODEL:-200,400}; [ "$variant" = nomodel ] && { flag="--no-model"; ladder=${LADDER_NOMODEL:-200,400}; }
    echo "round $r $variant start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    # shellcheck disable=SC2086  # T is a list of globs
    .venv/bin/compactd bench load --trajectories $T $flag --agents "$ladder" --max-agents 4000 \
      --seconds 60 --seed "$r" --json "$out/$variant-$r.json" || true   # exit 1 = a goal missed; in the JSON
    echo "round $r $variant end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
