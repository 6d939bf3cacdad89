"""The classifier's candidate scan (summarizer.compress.classify._candidates) and compress() over the
16 CILogBench logs, 3 passes each, in CPU seconds. Interleave two trees as speed.py says."""

from __future__ import annotations

import time
from pathlib import Path

from summarizer.compress import classify
from summarizer.compressors import compress

LOGS = [p.read_text(errors="replace") for p in sorted(Path("/tmp/shared/cilogbench").glob("*/*/raw.log"))]
t0 = time.process_time()
for text in LOGS * 3:
    classify._candidates(text)
t1 = time.process_time()
for text in LOGS * 3:
    compress(text, ref="a1")
t2 = time.process_time()
print(f"candidates {t1 - t0:.2f}s compress {t2 - t1:.2f}s")
