"""Steal time per window from rerun.sh's stat.txt: the share of the two CPUs' time the hypervisor gave
to others, and the share they were busy here. Usage: python3 steal.py OUTDIR/stat.txt"""

from __future__ import annotations

import sys
from itertools import pairwise
from pathlib import Path

rows = []
for line in Path(sys.argv[1]).read_text().splitlines():
    when, _cpu, *ticks = line.split()
    rows.append((when, [int(t) for t in ticks]))
for (_, a), (when, b) in pairwise(rows):
    d = [y - x for x, y in zip(a, b, strict=True)]
    total = sum(d[:8]) or 1
    busy = total - d[3] - d[4] - d[7]
    print(f"{when} steal {100 * d[7] / total:5.1f} %  busy {100 * busy / total:5.1f} %")
