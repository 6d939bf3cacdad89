import sys
if "run" in sys.argv and any("--socket" in a for a in sys.argv):
    import atexit, json, os, time, collections, asyncio.events as ev
    long = collections.Counter(); longsum = collections.Counter(); total = collections.Counter(); cnt = collections.Counter()
    orig = ev.Handle._run
    def name(h):
        cb = h._callback
        t = getattr(cb, "__self__", None)
        if t is not None and hasattr(t, "get_coro"):
            c = t.get_coro()
            fr = getattr(c, "cr_frame", None)
            n = getattr(c, "__qualname__", str(c))
            # innermost awaited frame
            inner = c
            while True:
                nxt = getattr(inner, "cr_await", None)
                if nxt is None or not hasattr(nxt, "cr_frame"): break
                inner = nxt
            return n + " @ " + getattr(inner, "__qualname__", "?")
        return getattr(cb, "__qualname__", repr(cb))[:80]
    def _run(self):
        t = time.perf_counter()
        try:
            return orig(self)
        finally:
            d = time.perf_counter() - t
            if d > 0.0005:
                n = name(self)
                total[n] += d; cnt[n] += 1
                if d > 0.02:
                    long[n] += 1; longsum[n] += d
    ev.Handle._run = _run
    def _dump():
        out = {"total": total.most_common(25), "count": {k: cnt[k] for k, _ in total.most_common(25)},
               "over20ms": long.most_common(25), "over20ms_s": longsum.most_common(25)}
        open(f"/tmp/prof/handles-{os.getpid()}.json", "w").write(json.dumps(out, indent=1))
    atexit.register(_dump)
