import sys

if "run" in sys.argv and any("--socket" in a for a in sys.argv):
    import atexit
    import cProfile
    import os

    prof = cProfile.Profile()
    prof.enable()

    def _dump():
        prof.disable()
        prof.dump_stats(f"/tmp/prof/loop-{os.getpid()}.pstats")

    atexit.register(_dump)
