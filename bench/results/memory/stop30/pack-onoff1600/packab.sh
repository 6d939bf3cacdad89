#!/bin/bash
# the same tree, [daemon] pack_texts on (the default) and off, AGENTS agents, 3 rounds interleaved
cd /work/main
S=$(realpath ../shared/trajectories)
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
out=${OUT:?}; mkdir -p $out
printf '[daemon]\nmax_agents = 4000\npack_texts = false\n' > $out/off.toml
printf '[daemon]\nmax_agents = 4000\npack_texts = true\n' > $out/on.toml
for r in 1 2 3; do
  for v in off on; do
    echo "$r $v $(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)"
    timeout 900 .venv/bin/compactd bench load --trajectories $T --config $out/$v.toml --agents ${AGENTS:-1600} --max-agents ${AGENTS:-1600} --seconds 60 --seed $r --json $out/$v-$r.json > $out/$v-$r.log 2>&1
  done
done
echo done $(date -u +%T)
