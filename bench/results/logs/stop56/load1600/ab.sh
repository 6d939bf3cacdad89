#!/bin/bash
# interleaved A/B of one load step: base and new trees, 3 rounds
N=${N:-1600}; FLAG=${FLAG:---no-model}; TAG=${TAG:-nomodel}
S=/tmp/shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
for r in 1 2 3; do for t in base56 new56; do
  cd /tmp/$t
  echo "$t r$r start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=/tmp/$t .venv/bin/compactd bench load --trajectories $T $FLAG --agents $N --max-agents $N --seconds 60 --seed $r --json /tmp/ab56/$TAG-$t-$r.json > /tmp/ab56/$TAG-$t-$r.log 2>&1
  echo "$t r$r end $(date -u +%T) rc $?"
done; done
