#!/usr/bin/env bash
# One round of the replay at the defaults, optimistic only, two trees side by side (each on a daemon
# of its own, both at once); each daemon's log followed for bench/results/readahead/summary.py.
# Usage: ARMS="base:/tmp/A new:/tmp/F" OUT=DIR bench/results/readahead/ab_opt.sh
set -euo pipefail
out=${OUT:?OUT=DIR}
mkdir -p "$out"
S=/tmp/shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
pids=()
for arm in $ARMS; do
  name=${arm%%:*}; tree=${arm#*:}
  tmp=/tmp/ro_$name; rm -rf "$tmp"; mkdir -p "$tmp"
  (
    cd "$tree"
    # shellcheck disable=SC2086  # T is a list of globs
    TMPDIR=$tmp PYTHONPATH=$tree .venv/bin/compactd replay $T --budget 32000 --reserve 0.15 --turn-interval 2 \
      --policy optimistic --canaries bench/canaries.txt --seed 1 --jobs 4 \
      --json "$out/replay-$name.json" > "$out/replay-$name.out" 2>&1 || true
  ) &
  pids+=($!)
  (
    until d=$(ls -d "$tmp"/compactd-replay-optimistic-* 2>/dev/null | head -1) && [ -f "$d/daemon.log" ]; do sleep 1; done
    exec tail -n +1 -F "$d/daemon.log" > "$out/daemon-$name-optimistic.log" 2>/dev/null
  ) &
done
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" > "$out/when.txt"
for p in "${pids[@]}"; do wait "$p"; done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/when.txt"
sleep 2
pkill -f "tail -n +1 -F /tmp/ro_" || true
