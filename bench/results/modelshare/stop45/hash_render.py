"""The sha256 of every section of the 12 trajectories rendered uncut and cut to 300 and 900 chars, with
no ranks: two trees print the same hash when their deterministic renderings are byte-identical.

PYTHONPATH=TREE .venv/bin/python bench/results/modelshare/stop45/hash_render.py
"""

from __future__ import annotations

import glob
import hashlib

from summarizer.compress import Renderer
from watcher.eval.trajectories import load_many

S = "/tmp/shared/trajectories"
T = [
    *sorted(glob.glob(f"{S}/mini-swe-agent/*.json")),
    f"{S}/openhands/output.jsonl",
    f"{S}/openhands-nunu0404/output.jsonl",
    f"{S}/swe-agent/pydicom__pydicom-1458.traj",
]
h = hashlib.sha256()
for t in load_many(T):
    for turn in t.turns:
        for sec in turn:
            r = Renderer(sec.text, ref="x")
            for m in (None, 300, 900):
                h.update(r.render(m).text.encode())
print(h.hexdigest())
