"""Every failure line (summarizer.compress.classify) of every section of the 12 trajectories and
of every CILogBench log, one per output line (`source<TAB>line`), to diff two trees' classifiers:

PYTHONPATH=TREE .venv/bin/python bench/results/signals/stop57/failure_lines.py > TREE.txt
"""

from __future__ import annotations

import glob
import sys
from pathlib import Path

from summarizer.compress.classify import classify
from summarizer.compress.clean import clean_text
from watcher.eval.bench.cilog import find_cases
from watcher.eval.trajectories import load_many

SHARED = Path("/tmp/shared")  # ../shared, linked where the bench scripts read it


def main() -> None:
    texts: list[tuple[str, str]] = [(c.name, c.raw) for c in find_cases(SHARED / "cilogbench")]
    paths = sorted(glob.glob(str(SHARED / "trajectories/mini-swe-agent/*.json")))
    paths += sorted(glob.glob(str(SHARED / "trajectories/openhands*/output.jsonl")))
    paths += sorted(glob.glob(str(SHARED / "trajectories/swe-agent/*.traj")))
    for t in load_many(paths):
        texts += [(f"{t.name}:{s.id}", s.text) for s in t.sections]
    n = 0
    for source, text in texts:
        raw = text.split("\n")
        lines = classify(raw, clean_text(text))
        for i, failure in enumerate(lines.failure):
            if failure:
                n += 1
                print(f"{source}\t{lines.clean[i][:200]}")
    print(f"{n} failure lines in {len(texts)} texts", file=sys.stderr)


if __name__ == "__main__":
    main()
