"""Where each needed name the offline plays lost occurs in its trajectory (stop 52).

Reads the ``lost:`` lines of the explain files next to this script (``bench/nfr_offline.py
--explain``) and prints, per distinct lost name: the section that held it, every section that
holds it, and whether the task (the first two sections) names it. Run from the repository root:
``PYTHONPATH=. .venv/bin/python bench/results/nfr2/stop52/lost.py``."""

from __future__ import annotations

import re
from pathlib import Path

from bench.nfr_offline import shared_trajectories
from watcher.eval.trajectories import load_many

HERE = Path(__file__).parent
LOST = re.compile(r"^lost: (\S+): (s\d+):(\S+) \((\w+)\)")


def main() -> None:
    lost: dict[tuple[str, str, str], list[str]] = {}
    for f in sorted(HERE.glob("explain-*.txt")):
        for line in f.read_text().splitlines():
            if m := LOST.match(line):
                lost.setdefault((m[1], m[2], m[3]), []).append(f.stem.removeprefix("explain-"))
    trajs = {t.name: t for t in load_many(shared_trajectories())}
    print("trajectory | section | name | lost in plays | sections holding it (index:kind) | in the task")
    for (traj, sid, name), plays in sorted(lost.items()):
        secs = trajs[traj].sections
        where = [f"{i}:{s.kind}" for i, s in enumerate(secs) if name in s.text]
        task = any(name in s.text for s in secs[:2])
        print(f"{traj} | {sid} | {name} | {' '.join(plays)} | {' '.join(where)} | {task}")


if __name__ == "__main__":
    main()
