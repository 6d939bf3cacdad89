#!/bin/bash
# wait for a daemon, then at T seconds dump tracemalloc + smaps summary
T=${1:-50}
out=${2:-/tmp/mem}
for i in $(seq 1 120); do pid=$(pgrep -f "watcher run --socket" | head -1); [ -n "$pid" ] && break; sleep 1; done
echo "daemon $pid"; sleep $T
kill -USR2 $pid
for p in $pid $(pgrep -P $pid); do
  echo "== $p $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-80)"; grep -E "^(Rss|Pss|Pss_Anon|Pss_File|Anonymous)" /proc/$p/smaps_rollup
  echo "-- by name"
  awk '/^[0-9a-f]+-[0-9a-f]+ /{name=$6; if(name=="")name="[anon]"} /^Pss:/{pss[name]+=$2} END{for(n in pss) if(pss[n]>1500) printf "%8.1f MB %s\n", pss[n]/1024, n}' /proc/$p/smaps | sort -rn | head -15
  echo "-- single mappings > 4 MB"
  awk '/^[0-9a-f]+-[0-9a-f]+ /{range=$1; name=$6; if(name=="")name="[anon]"} /^Size:/{size=$2} /^Pss:/{if($2>4096) printf "%8.1f MB pss of %8.1f MB %s %s\n", $2/1024, size/1024, name, range}' /proc/$p/smaps | sort -rn | head -20
done > $out.smaps 2>&1
