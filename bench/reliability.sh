#!/bin/sh
# The long reliability runs of issue 9, each printing (and saving) its JSON:
#   fuzz       100k malformed frames against a running daemon
#   load       200 agents x 5 deltas/s for 60 s (RSS curve, ingest p99, compaction queue fairness)
#   load-kill  the same with kill -9 of the daemon at 30 s and a restart under load
# Usage: bench/reliability.sh [OUTDIR]   (default bench/results). Exit status 1 if a goal was missed.
set -u
cd "$(dirname "$0")/.."
out=${1:-bench/results}
mkdir -p "$out"
status=0
.venv/bin/compactd bench fuzz --frames 100000 --json "$out/fuzz.json" || status=1
.venv/bin/compactd bench load --agents 200 --rate 5 --seconds 60 --json "$out/load.json" || status=1
.venv/bin/compactd bench load --agents 200 --rate 5 --seconds 60 --kill-at 30 --json "$out/load-kill.json" \
    || status=1
exit $status
