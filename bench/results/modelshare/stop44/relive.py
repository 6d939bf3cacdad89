"""The digests of a kept replay daemon's state that were not the model's, digested again from the
archive with the model and no deadline (the target as the planner sets it). How it ran (stop 44):

    compactd run --socket ipc:///tmp/d44/s.sock --state-dir /tmp/d44/state --metrics off \
        --mqtt off 2> /tmp/d44/daemon.log &
    compactd replay TRAJ... --connect ipc:///tmp/d44/s.sock --turn-interval 2 --budget 32000 \
        --reserve 0.15 --jobs 2
    .venv/bin/python bench/results/modelshare/stop44/relive.py /tmp/d44/state/compactd.db
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys

from summarizer.digest import Item, Summarizer
from summarizer.engine import EngineSettings, LlamaEngine
from watcher.eval.replay import token_counter
from watcher.planning.planner import digest_target
from watcher.runtime.paths import default_model_path


async def main(path: str) -> None:
    count = token_counter(True)
    db = sqlite3.connect(path)
    rows = db.execute("select agent, ref, method from digests order by created").fetchall()
    engine = LlamaEngine(EngineSettings(str(default_model_path()), weights="q4_0", flash_attn=True))
    summ = Summarizer(engine, count=count)
    for agent, ref, method in rows:
        if method == "model":
            continue
        seq = db.execute("select seq from archive where ref = ?", (ref,)).fetchone()[0]
        q = "select section_id, kind, text from originals where seq = ? order by pos"
        items = [Item(sid, kind, text, count(text)) for sid, kind, text in db.execute(q, (seq,))]
        before = sum(i.tokens for i in items)
        target = digest_target(before, 32000)
        d = await summ.digest(items, ref, target)
        shape = [(i.id, i.kind, i.tokens) for i in items][:8]
        print(agent[-25:], ref, len(items), before, target, d.method, d.model_skipped, d.scored_tokens, shape)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
