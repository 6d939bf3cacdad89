#!/bin/bash
# ARMS "name:tree:extra_pythonpath:env ..." interleaved ROUNDS at AGENTS
S=/tmp/shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
out=${OUT:?}; mkdir -p $out
for r in $(seq 1 ${ROUNDS:-3}); do
  for arm in $ARMS; do
    IFS=: read -r name tree extra envs flags <<< "$arm"
    echo "$r $name $(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)"
    pp=$tree; [ -n "$extra" ] && pp=$extra:$tree
    (cd $tree && env PYTHONPATH=$pp $envs timeout 900 $tree/.venv/bin/compactd bench load --trajectories $T $FLAGS $flags \
      --agents ${AGENTS:-800} --max-agents ${AGENTS:-800} --seconds 60 --seed $r --json $out/$name-$r.json > $out/$name-$r.log 2>&1)
  done
done
echo done $(date -u +%T)
