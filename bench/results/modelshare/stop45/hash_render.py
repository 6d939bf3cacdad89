"""The sha256 of every section of the 12 trajectories rendered uncut and cut to 300 and 900 chars, with
no ranks: two trees print the same hash when their deterministic renderings are byte-identical.

PYTHONPATH=TREE .venv/bin/python bench/results/modelshare/stop45/hash_render.py
"""

from __future__ import annotations

import hashlib
import sys

sys.path.insert(0, "bench")
import nfr_offline as N

from summarizer.compress import Renderer
from watcher.eval.trajectories import load_many

h = hashlib.sha256()
for t in load_many(N.shared_trajectories()):
    for turn in t.turns:
        for sec in turn:
            r = Renderer(sec.text, ref="x")
            for m in (None, 300, 900):
                h.update(r.render(m).text.encode())
print(h.hexdigest())
