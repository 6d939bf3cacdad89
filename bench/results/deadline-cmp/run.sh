#!/usr/bin/env bash
# main (git archive of main, /tmp/sched-base) vs sched, interleaved, no model, 40 s per step
S=/work/wt/shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
cd /tmp/sched-cmp4
export PYTHONDONTWRITEBYTECODE=1
one() {  # version agents round
  echo "$(date -u +%T) $1 n$2 r$3 start $(uptime)" >> log.txt
  if [ $1 = main ]; then P=/tmp/sched-base; else P=; fi
  PYTHONPATH=$P /work/wt/sched/.venv/bin/python -m watcher bench load --trajectories $T --agents $2 --max-agents $2 \
    --seconds 40 --no-model --json $1-n$2-r$3.json > $1-n$2-r$3.out 2>&1
  echo "$(date -u +%T) $1 n$2 r$3 done rc=$? $(uptime)" >> log.txt
}
while pgrep -f "bench load --trajectories" >/dev/null && ps -eo args | grep -q "[s]ched-n200-r2.json\|[s]ched-n200-r3.json\|[m]ain-n200-r2.json"; do sleep 2; done
for r in 1 2 3; do one sched 200 $r; one main 200 $r; one main 400 $r; one sched 400 $r; done
echo ALLDONE >> log.txt
