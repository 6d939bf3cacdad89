#!/bin/bash
# Side by side: the base tree (BASE_TREE, e.g. `git archive bdbdfd2 | tar x -C /tmp/base`) and this one, alternating.
cd "$(dirname "$0")/.."
for r in 1 2 3; do
  for v in main final; do
    if [ $v = main ]; then pp=${BASE_TREE:?set BASE_TREE to a git archive of the base commit}; else pp=/work/main; fi
    echo "$r $v $(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)"
    PYTHONPATH=$pp timeout 600 .venv/bin/compactd bench load --agents 200 --rate 5 --seconds 60 --no-model --json bench/results/synthetic/ab2-$v-$r.json > /dev/null 2>&1
  done
done
echo "model final $(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)"
timeout 600 .venv/bin/compactd bench load --agents 200 --rate 5 --seconds 60 --json bench/results/synthetic/ab2-final-model-1.json > /dev/null 2>&1
echo done $(date -u +%T)
