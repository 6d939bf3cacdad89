#!/bin/bash
# Side by side: the base tree (BASE_TREE, e.g. `git archive bdbdfd2 | tar x -C /tmp/base`) and this one,
# alternating, three rounds of the synthetic load (200 agents x 5 deltas/s, 60 s). OUT: the folder of the
# JSON files; MODEL=1: with the model (default: --no-model). Each tree runs from its own directory with
# PYTHONPATH set to it: a tree older than `watcher_argv` (python -P) starts `python -m watcher` with
# the working directory first on the module path.
cd "$(dirname "$0")/.."
here=$PWD
out=$(realpath -m "${OUT:-bench/results/synthetic}")
mkdir -p "$out"
flag=--no-model
[ "${MODEL:-0}" = 1 ] && flag=
for r in 1 2 3; do
  for v in base new; do
    if [ $v = base ]; then pp=$(realpath "${BASE_TREE:?set BASE_TREE to a git archive of the base commit}"); else pp=$here; fi
    echo "$r $v $(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)"
    (cd "$pp" && PYTHONPATH=$pp timeout 600 "$here/.venv/bin/compactd" bench load --agents 200 --rate 5 --seconds 60 \
      $flag --json "$out/$v-$r.json" > /dev/null 2>&1)
  done
done
echo done $(date -u +%T)
