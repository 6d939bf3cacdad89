import sys

if "run" in sys.argv and any("--socket" in a for a in sys.argv):
    import os
    import threading
    import time
    import tracemalloc

    tracemalloc.start(1)

    def run():
        time.sleep(float(os.environ.get("TM_AFTER_S", "50")))
        snap = tracemalloc.take_snapshot()
        with open(f"/tmp/prof/tm-{os.getpid()}.txt", "w") as f:
            stats = snap.statistics("lineno")
            f.write(f"total {sum(s.size for s in stats) / 1e6:.1f} MB\n")
            for s in stats[:40]:
                f.write(f"{s.size / 1e6:8.2f} MB {s.count:8d} {s.traceback}\n")
            f.write("\nby file\n")
            for s in snap.statistics("filename")[:25]:
                f.write(f"{s.size / 1e6:8.2f} MB {s.count:8d} {s.traceback}\n")

    threading.Thread(target=run, daemon=True).start()
