#!/bin/bash
# $1 tree, $2 tag
tree=$1; tag=$2
S=/work/shared/trajectories
T="$S/mini-swe-agent/*.json $S/openhands/output.jsonl $S/openhands-nunu0404/output.jsonl $S/swe-agent/pydicom__pydicom-1458.traj"
rm -f $(dirname "$0")/dump-*.json $(dirname "$0")/pymalloc-*.txt
(cd $tree && PYTHONPATH=$(dirname "$0"):$tree timeout 900 /work/main/.venv/bin/compactd bench load --trajectories $T --agents 800 --max-agents 800 --seconds 60 --seed 1 --json $(dirname "$0")/$tag.json > $(dirname "$0")/$tag.log 2>&1) &
for i in $(seq 1 120); do pid=$(pgrep -f "watcher run --socket" | head -1); [ -n "$pid" ] && break; sleep 1; done
echo daemon $pid
sleep 58
kill -USR2 $pid
sleep 3
grep -E "^(Rss|Pss|Pss_Anon|Pss_File)" /proc/$pid/smaps_rollup > $(dirname "$0")/$tag.rollup
awk '/^[0-9a-f]+-[0-9a-f]+ /{name=$6; if(name=="")name="[anon]"} /^Pss:/{pss[name]+=$2} END{for(n in pss) if(pss[n]>1500) printf "%8.1f MB %s\n", pss[n]/1024, n}' /proc/$pid/smaps | sort -rn | head -12 >> $(dirname "$0")/$tag.rollup
for p in $(pgrep -P $pid); do echo "child $p $(grep ^Pss: /proc/$p/smaps_rollup)" >> $(dirname "$0")/$tag.rollup; done
cp $(dirname "$0")/dump-$pid.json $(dirname "$0")/$tag.dump.json; cp $(dirname "$0")/pymalloc-$pid.txt $(dirname "$0")/$tag.pymalloc.txt
wait
