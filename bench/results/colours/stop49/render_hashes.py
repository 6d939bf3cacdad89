"""One line per section of the 12 shared trajectories: its id, whether it holds an escape byte, and
the sha256 of its renderings (uncut, 300 and 900 chars, no ranks) and of its names and identifiers.
Two trees' outputs, diffed, show which sections a change renders or reads differently.

From a tree's root: PYTHONPATH=TREE .venv/bin/python -P bench/results/colours/stop49/render_hashes.py
"""

from __future__ import annotations

import hashlib
import sys

sys.path.insert(0, "bench")
import nfr_offline as N

from summarizer.compress import Renderer
from summarizer.items import Item
from summarizer.names import ranked_names
from watcher.eval.trajectories import load_many
from watcher.planning.identifiers import identifiers

for k, t in enumerate(load_many(N.shared_trajectories())):
    for turn in t.turns:
        for sec in turn:
            r = Renderer(sec.text, ref="x")
            h = hashlib.sha256()
            for m in (None, 300, 900):
                h.update(r.render(m).text.encode())
            h.update(" ".join(ranked_names([Item(sec.id, sec.kind, sec.text, 1)])).encode())
            h.update(" ".join(sorted(identifiers(sec.text))).encode())
            print(k, sec.id, "\x1b" in sec.text, h.hexdigest()[:16])
