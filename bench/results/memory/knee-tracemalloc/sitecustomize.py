"""Measurement only: tracemalloc in the compactd daemon process; SIGUSR2 writes a snapshot summary."""

import os
import sys

if os.environ.get("CTM_OUT") and sys.argv[:1] and "run" in sys.argv[1:3]:
    import signal
    import tracemalloc

    tracemalloc.start(int(os.environ.get("CTM_FRAMES", "3")))

    def _dump(signum, frame):
        snap = tracemalloc.take_snapshot()
        out = os.environ["CTM_OUT"] + f".{os.getpid()}.{int(__import__('time').time())}"
        with open(out, "w") as f:
            cur, peak = tracemalloc.get_traced_memory()
            f.write(f"traced current {cur / 1e6:.1f} MB peak {peak / 1e6:.1f} MB\n")
            for st in snap.statistics("lineno")[:40]:
                f.write(f"{st.size / 1e6:8.2f} MB {st.count:8d} {st.traceback}\n")
            f.write("--- by file\n")
            for st in snap.statistics("filename")[:30]:
                f.write(f"{st.size / 1e6:8.2f} MB {st.count:8d} {st.traceback}\n")
            f.write("--- tracebacks\n")
            for st in snap.statistics("traceback")[:15]:
                f.write(f"{st.size / 1e6:8.2f} MB {st.count:8d}\n")
                for line in st.traceback.format():
                    f.write("    " + line + "\n")

    signal.signal(signal.SIGUSR2, _dump)
