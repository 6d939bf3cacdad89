#!/usr/bin/env bash
set -uo pipefail
cd /tmp/X43
out=$1; N=$2; mkdir -p $out
S=../shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
for r in 1 2 3; do
  for arm in base:0 pool2:2; do
    name=${arm%%:*}; th=${arm##*:}
    echo "$r $name start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    COMPACTD_EXP_THREADS=$th PYTHONPATH=/tmp/X43 .venv/bin/compactd bench load --trajectories $T ${FLAGS:-} --agents $N --max-agents $N \
      --seconds 60 --seed $r --json $out/$name-$r.json > $out/$name-$r.log 2>&1
    python3 -c "
import json; d=json.load(open('$out/$name-$r.json')); s=d['steps'][0]
print('   ', '$name', $r, 'ing99', s['ingest_ms_p99'], 'p50', s['ingest_ms_p50'], 'lag', s['daemon_loop_lag_ms_p99'], 'stalls', s['stalled_calls'], 'ovf', s['overflow_calls'], 'qw99', s['queue_wait_ms_p99'], 'cps', s['compactions_per_s'], 'cpu', s['daemon_cpu_pct_mean'], 'pss', s['pss_mb_max'], 'mj', s['model_jobs'])"
  done
done
echo done $(date -u +%T)
