#!/usr/bin/env bash
# Issue 15 at the defaults, two trees side by side: each plays the 12 shared trajectories with
# POLICIES (--jobs 4, --rounds R) on daemons of its own, both at once; each daemon's log is followed
# (tail -F) so that bench/results/readahead/summary.py can count each digest once.
# Usage: ARMS="base:/tmp/A new:/tmp/B" OUT=DIR [ROUNDS=3] [POLICIES=optimistic,recency] bench/results/readahead/ab.sh
set -euo pipefail
out=${OUT:?OUT=DIR}; rounds=${ROUNDS:-3}; policies=${POLICIES:-optimistic,recency}
mkdir -p "$out"
S=/tmp/shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
pids=()
for arm in $ARMS; do
  name=${arm%%:*}; tree=${arm#*:}
  tmp=/tmp/rb_$name; rm -rf "$tmp"; mkdir -p "$tmp"
  (
    cd "$tree"
    # shellcheck disable=SC2086  # T is a list of globs
    TMPDIR=$tmp PYTHONPATH=$tree .venv/bin/compactd replay $T --budget 32000 --reserve 0.15 --turn-interval 2 \
      --policy "$policies" --rounds "$rounds" --canaries bench/canaries.txt --seed 1 --jobs 4 \
      --json "$out/replay-$name.json" > "$out/replay-$name.out" 2>&1 || true
  ) &
  pids+=($!)
  (
    for p in ${policies//,/ }; do
      until d=$(ls -d "$tmp"/compactd-replay-$p-* 2>/dev/null | head -1) && [ -f "$d/daemon.log" ]; do sleep 1; done
      tail -n +1 -F "$d/daemon.log" > "$out/daemon-$name-$p.log" 2>/dev/null &
    done
    wait
  ) &
done
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" > "$out/when.txt"
for p in "${pids[@]}"; do wait "$p"; done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/when.txt"
sleep 2
pkill -f "tail -n +1 -F /tmp/rb_" || true
