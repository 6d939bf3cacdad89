#!/bin/bash
S=/tmp/shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
out=/tmp/replay32; mkdir -p $out
printf '[model]\nscore_rows = 128\n' > $out/rows128.toml
cd /tmp/new32e
for v in rows64 rows128; do
  cfg=(); [ $v = rows128 ] && cfg=(--config $out/rows128.toml)
  echo "$v $(date -u +%T) $(cut -d' ' -f1 /proc/loadavg)"
  PYTHONPATH=/tmp/new32e timeout 1500 .venv/bin/compactd replay $T --budget 32000 --reserve 0.15 --turn-interval 2 --policy optimistic --canaries bench/canaries.txt --seed 1 --jobs 4 "${cfg[@]}" --json $out/$v.json > $out/$v.log 2>&1
done
echo done $(date -u +%T)
