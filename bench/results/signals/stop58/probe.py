"""Held-out labelled signals as log lines: which of them the classifier takes as a failure line.

The input is the `required_signals` of CILogBench's v2 cases (LogDx, CC-BY-4.0: "LogDx-CI /
CILogBench, eyuansu62/LogDx"), which ../shared does not hold: `cases/v2/{dev,holdout,stress}/*/
ground_truth.json` of that repository, gathered into one JSON object per split, case name -> its
signals. Each signal's `value` (or an alias, or its `file`) is judged alone, as a whole line, with
summarizer.compress.classify.is_failure: a coarse view (the real line may hold more, and a context
line is kept by its failure's block, not by its own class), meant to find formats the rules do not
know. Run from a tree's root: PYTHONPATH=TREE python probe.py SIGNALS.json...
"""

from __future__ import annotations

import json
import sys

from summarizer.compress.classify import is_failure


def main(paths: list[str]) -> None:
    total = failing = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            cases = json.load(f)
        for case, signals in cases.items():
            for s in signals:
                value = s.get("value") or s.get("file") or ""
                hit = is_failure(value) or any(is_failure(a) for a in s.get("aliases") or [])
                total += 1
                failing += hit
                if not hit:
                    importance = s.get("importance", "")[:4]
                    print(f"{case[:28]:28} {importance:4} {s['type'][:14]:14} {value[:150]!r}")
    print("failure lines:", failing, "of", total)


if __name__ == "__main__":
    main(sys.argv[1:])
