import json, glob, statistics, sys
tag = sys.argv[1]
keys = ["ingest_ms_p99", "daemon_loop_lag_ms_p99", "daemon_cpu_pct_mean", "compactions_per_s", "overflow_calls", "stalled_calls", "queue_wait_ms_p99", "pss_mb_max"]
rows = {}
for t in ("base56", "new56"):
    for r in (1, 2, 3):
        try: s = json.load(open(f"/tmp/ab56/{tag}-{t}-{r}.json"))["steps"][0]
        except Exception as e: continue
        s["cpu_ms_per_compaction"] = round(s["daemon_cpu_pct_mean"] * 10 / s["compactions_per_s"], 2)
        rows.setdefault(t, []).append(s)
        print(t, r, {k: s.get(k) for k in keys + ["cpu_ms_per_compaction"]})
for t, ss in rows.items():
    print(t, "median:", {k: statistics.median([x.get(k) or 0 for x in ss]) for k in keys + ["cpu_ms_per_compaction"]})
