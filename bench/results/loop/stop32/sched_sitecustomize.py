import sys

if "run" in sys.argv and any("--socket" in a for a in sys.argv):
    import atexit
    import json
    import os
    import time
    from pathlib import Path

    import watcher.serve.scheduler as sm

    stats = {"expedite": [], "next": [], "waiting": []}
    orig_e, orig_n = sm.FairScheduler._expedite, sm.FairScheduler._next

    def _expedite(self, now):
        t0 = time.perf_counter()
        try:
            return orig_e(self, now)
        finally:
            stats["expedite"].append(time.perf_counter() - t0)
            stats["waiting"].append(len(self._jobs))

    def _next(self, now, line=None):
        t0 = time.perf_counter()
        try:
            return orig_n(self, now, line)
        finally:
            stats["next"].append(time.perf_counter() - t0)

    sm.FairScheduler._expedite = _expedite
    sm.FairScheduler._next = _next

    def _dump():
        out = {}
        for key, values in stats.items():
            v = sorted(values)
            if v:
                scale = 1 if key == "waiting" else 1000
                out[key] = {
                    "n": len(v),
                    "sum": round(sum(v), 3),
                    "p50": round(v[len(v) // 2] * scale, 3),
                    "p99": round(v[int(len(v) * 0.99)] * scale, 3),
                    "max": round(v[-1] * scale, 2),
                }
        Path(f"/tmp/prof/sched-{os.getpid()}.json").write_text(json.dumps(out, indent=1))

    atexit.register(_dump)
