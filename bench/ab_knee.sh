#!/bin/bash
# Side by side at the knee: the base tree (BASE_TREE) and this one, alternating, ROUNDS (default 3) runs
# each of AGENTS (default 200) agents replaying real trajectories with the model (NOMODEL=1: without),
# 60 s, seed = round.
# Each tree runs from its own directory with PYTHONPATH set to it (see ab_synthetic.sh). OUT: JSON folder.
cd "$(dirname "$0")/.."
here=$PWD
S=$(realpath ../shared/trajectories)
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
out=$(realpath -m "${OUT:-bench/results/knee-ab}")
mkdir -p "$out"
flag=
[ "${NOMODEL:-0}" = 1 ] && flag=--no-model
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in base new; do
    if [ $v = base ]; then pp=$(realpath "${BASE_TREE:?set BASE_TREE to a git archive of the base commit}"); else pp=$here; fi
    echo "$r $v $(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)"
    # shellcheck disable=SC2086  # T is a list of globs
    (cd "$pp" && PYTHONPATH=$pp timeout 900 "$here/.venv/bin/compactd" bench load --trajectories $T $flag \
      --agents "${AGENTS:-200}" --max-agents "${AGENTS:-200}" --seconds 60 --seed "$r" --json "$out/$v-$r.json" > /dev/null 2>&1)
  done
done
echo done $(date -u +%T)
