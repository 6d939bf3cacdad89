"""How many tool outputs of the 12 shared trajectories hold a big family of numbered names
(summarizer.facts.big_families): the ones the family cap can change. From the tree's root:
.venv/bin/python bench/results/builds/stop51/families.py
"""

from __future__ import annotations

import sys

from summarizer.facts import big_families
from summarizer.items import Item
from summarizer.names import ranked_names
from watcher.eval.trajectories import load_many

sys.path.insert(0, "bench")
from nfr_offline import shared_trajectories

outputs = 0
found: list[list[str]] = []
for traj in load_many(shared_trajectories()):
    for turn in traj.turns:
        for s in turn:
            if s.kind == "tool_result":
                outputs += 1
                big = big_families(ranked_names([Item(s.id, s.kind, s.text, 1)]))
                if big:
                    found.append(sorted(big))
print(f"{len(found)} of {outputs} tool outputs hold a big family: {found}")
