"""The C heap helpers on this machine's glibc: the arena limit is taken, a trim gives freed
pages in the middle of the heap back to the kernel (a freed top alone would not need it), and with
the daemon's settings a big block freed after another one still goes back."""

from __future__ import annotations

import subprocess
import sys

RSS = """
def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
"""

PROBE = (
    RSS
    + """
import random
from watcher.serve import heap

assert heap.limit_arenas(2)
keep, blocks = [], [bytes(random.randint(600, 5000)) for _ in range(60_000)]
for i, b in enumerate(blocks):  # every third block stays: the heap's top is in use, its middle free
    if i % 3 == 0:
        keep.append(b)
del blocks
before = rss_kb()
freed = heap.trim()
print(before, rss_kb(), freed)
"""
)


def test_a_trim_returns_the_free_middle_of_the_heap() -> None:
    probe = [sys.executable, "-c", PROBE]  # its own process: this one's heap is not the test's
    out = subprocess.run(probe, capture_output=True, text=True, check=True, timeout=60)
    before, after, freed = out.stdout.split()
    assert freed == "True"
    assert int(before) - int(after) > 20_000, out.stdout  # kB (35 MB here, of ~110 MB freed in small runs)


BIG = (
    RSS
    + """
import sys
from watcher.serve import heap

if sys.argv[1] == "configured":
    assert heap.configure()
first = bytearray(24 << 20)  # mapped (over glibc's default threshold); freeing it raises that threshold
del first
big = bytearray(24 << 20)  # glibc's raised threshold: from the heap; the daemon's fixed one: mapped
above = [bytes(1000) for _ in range(100)]  # blocks above it: the heap's top stays in use
before = rss_kb()
del big
print(before - rss_kb())
"""
)


def test_with_the_daemons_settings_a_big_block_goes_back_when_freed() -> None:
    def given_back(mode: str) -> int:  # kB; each in its own process (a fresh heap)
        probe = [sys.executable, "-c", BIG, mode]
        return int(subprocess.run(probe, capture_output=True, text=True, check=True, timeout=60).stdout)

    assert given_back("configured") > 20_000  # the 24 MB block's pages
    assert given_back("default") < 4_000  # glibc's own threshold kept them: what the setting is for
