#!/bin/bash
# Three arms interleaved, ROUNDS (default 3) rounds of AGENTS (default 800) agents replaying the
# trajectories with the model, 60 s, seed = the round: the base tree (BASE_TREE), this tree with the
# defaults, and this tree with [model] score_rows = 64. Each tree runs from its own directory with
# PYTHONPATH set to it (as bench/ab_knee.sh). OUT: the JSON folder.
cd "$(dirname "$0")/../../../.."
here=$PWD
S=$(realpath ../shared/trajectories)
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
out=$(realpath -m "${OUT:?}"); mkdir -p "$out"
printf '[daemon]\nmax_agents = 4000\n[model]\nscore_rows = 64\n' > "$out/rows64.toml"
n=${AGENTS:-800}
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in base new rows64; do
    pp=$here; cfg=()
    [ $v = base ] && pp=$(realpath "${BASE_TREE:?set BASE_TREE to a git archive of the base commit}")
    [ $v = rows64 ] && cfg=(--config "$out/rows64.toml")
    echo "$r $v $(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)"
    # shellcheck disable=SC2086  # T is a list of globs
    (cd "$pp" && PYTHONPATH=$pp timeout 900 "$here/.venv/bin/compactd" bench load --trajectories $T "${cfg[@]}" \
      --agents "$n" --max-agents "$n" --seconds 60 --seed "$r" --json "$out/$v-$r.json" > "$out/$v-$r.log" 2>&1)
  done
done
echo done $(date -u +%T)
