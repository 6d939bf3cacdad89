#!/bin/bash
# The model ladder (knee_rounds.sh's model half: 200,400, doubling while clean, seed = round) on two
# trees, interleaved per round: BASE_TREE (a git archive of the base commit) then this tree.
# Each from its own directory with PYTHONPATH set to it. OUT: JSON folder.
cd "$(dirname "$0")/../../../.."
here=$PWD
S=$(realpath ../shared/trajectories)
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
out=$(realpath -m "${OUT:-bench/results/knee/stop30}")
mkdir -p "$out"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in base new; do
    if [ $v = base ]; then pp=$(realpath "${BASE_TREE:?}"); else pp=$here; fi
    echo "$r $v start $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    # shellcheck disable=SC2086  # T is a list of globs
    (cd "$pp" && PYTHONPATH=$pp timeout 1800 "$here/.venv/bin/compactd" bench load --trajectories $T \
      --agents 200,400 --max-agents 2000 --seconds 60 --seed "$r" --json "$out/$v-$r.json" > "$out/$v-$r.log" 2>&1)
    echo "$r $v end $(date -u +%T) rc=$?"
  done
done
