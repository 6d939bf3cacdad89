#!/bin/bash
tree=/work/main
S=/work/shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
(cd $tree && CTM_OUT=/tmp/tm/snap CTM_FRAMES=4 PYTHONPATH=/tmp/tm:$tree timeout 900 /work/main/.venv/bin/compactd bench load --trajectories $T --agents 800 --max-agents 800 --seconds 60 --seed 1 --json /tmp/tm/run.json > /tmp/tm/run.log 2>&1) &
for i in $(seq 1 120); do pid=$(pgrep -f "watcher run --socket" | head -1); [ -n "$pid" ] && break; sleep 1; done
echo daemon $pid
sleep 58
kill -USR2 $pid
wait
