"""Summarize a py-spy raw (collapsed-stack) profile of the daemon: per thread group (the serving
loop's main thread, the other threads), the functions by inclusive samples and by own samples.

python3 spy_summary.py PROFILE.txt [TOP]
"""

from __future__ import annotations

import collections
import sys


def name(frame: str) -> str:
    """``func (path/file.py:line)`` -> ``func file.py``."""
    func, _, where = frame.partition(" (")
    return f"{func} {where.split(':')[0].split('/')[-1]}" if where else func


def main(path: str, top: int) -> None:
    groups: dict[str, tuple[collections.Counter[str], collections.Counter[str]]] = {}
    totals: collections.Counter[str] = collections.Counter()
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        group = "main (the serving loop)" if frames[0].startswith("_run_module") else "other threads"
        totals[group] += n
        inc, own = groups.setdefault(group, (collections.Counter(), collections.Counter()))
        seen: set[str] = set()
        for frame in frames[1:]:
            k = name(frame)
            if k not in seen:
                inc[k] += n
                seen.add(k)
        own[name(frames[-1])] += n
    for group, (inc, own) in groups.items():
        t = totals[group]
        print(f"== {group}: {t} samples")
        print("-- inclusive")
        for k, v in inc.most_common(top):
            print(f"{100 * v / t:5.1f}% {v:6d} {k}")
        print("-- own")
        for k, v in own.most_common(top // 2):
            print(f"{100 * v / t:5.1f}% {v:6d} {k}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 60)
