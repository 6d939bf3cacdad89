#!/bin/sh
# Stop 48: the digest and compress() before (A) and after (B) timestamps left out of the lines shown,
# interleaved, 3 rounds; recall and tokens are deterministic, the MB/s per core are the point.
# usage: run.sh A_TREE B_TREE OUT_DIR   (absolute paths; each tree has .venv)
set -e
A=$1 B=$2 OUT=$3
for r in 1 2 3; do
  for arm in A B; do
    eval tree=\$$arm
    (cd "$tree" && PYTHONPATH="$tree" .venv/bin/python -P -m watcher bench signals --cases /work/shared/cilogbench \
      --methods compress,digest --no-model --bad-input-mb 0 --repeat 2 --json "$OUT/$arm-$r.json" >/dev/null 2>&1 || true)
  done
done
