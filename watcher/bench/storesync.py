"""`compactd bench store-sync`: what each ``PRAGMA synchronous`` level costs a proposal's store work.

One proposal's life in the store is four commits: archive the originals, record it planned, mark it
sent (all before it leaves the daemon), and mark it acked. At level ``normal`` compactd fsyncs the
"sent" commit (the point of no return; in WAL mode it makes the archive commit durable too);
``normal_without_sync_point`` is plain SQLite NORMAL, for comparison. This times exactly that sequence through
watcher.store.Store on a real file in the given directory (the disk the state directory is on
matters: fsync is the cost), for each level side by side, interleaved round-robin so that disk
noise hits every level alike.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from ipc.protocol import Proposal
from ipc.sections import Section
from watcher.bench.crash import BenchError
from watcher.store import SYNCHRONOUS_LEVELS, Store

SECTION_CHARS: Final = 2000
SECTIONS: Final = 8
NORMAL_NO_SYNC_POINT: Final = "normal_without_sync_point"


def _region(n: int) -> tuple[Section, ...]:
    text = ("def f(x):\n    return x * 2  # some tool output line\n" * 60)[:SECTION_CHARS]
    return tuple(Section(f"s{n}-{i}", "tool_result", f"{n}:{i}:{text}", tokens=600) for i in range(SECTIONS))


def _one(store: Store, n: int) -> float:
    """The four commits of one proposal; returns seconds."""
    originals = _region(n)
    ref, pid = f"a{n}", f"p{n}"
    digest = Section(f"d{n}", "digest", "digest text " * 40, tokens=120, meta={"archive": ref})
    p = Proposal(pid, n, tuple(s.id for s in originals), (digest,), 4800, 120, 4800, (ref,))
    t0 = time.perf_counter()
    store.put_archive("bench", "default", ref, originals)
    store.plan("bench", "default", p, "deterministic")
    store.transition("bench", pid, "sent")
    store.transition("bench", pid, "acked", version=n + 1)
    return time.perf_counter() - t0


def run_store_sync(proposals: int = 200, directory: Path | None = None) -> dict[str, Any]:
    if proposals < 10:
        raise BenchError("--proposals must be at least 10")
    with tempfile.TemporaryDirectory(prefix="compactd-sync-", dir=directory) as tmp:
        stores = {
            level: Store.open(Path(tmp) / f"{level}.db", synchronous=level, integrity_check=False)
            for level in SYNCHRONOUS_LEVELS
        }
        # "normal" as compactd runs it fsyncs the commit before a proposal leaves; this one does not
        plain = Store.open(Path(tmp) / "plain.db", synchronous="normal", integrity_check=False)
        plain.sync_points = False
        stores[NORMAL_NO_SYNC_POINT] = plain
        times: dict[str, list[float]] = {level: [] for level in stores}
        try:
            for n in range(proposals):
                for level, store in stores.items():
                    times[level].append(_one(store, n))
        finally:
            for store in stores.values():
                store.close()
    out: dict[str, Any] = {"proposals": proposals, "commits_per_proposal": 4, "levels": {}}
    for level, ts in times.items():
        ms = sorted(t * 1000 for t in ts)
        out["levels"][level] = {
            "per_proposal_ms_p50": round(statistics.median(ms), 3),
            "per_proposal_ms_p99": round(ms[int(len(ms) * 0.99) - 1], 3),
            "proposals_per_s": round(len(ts) / sum(ts), 1),
        }
    lv = out["levels"]
    base = lv["normal"]["per_proposal_ms_p50"]
    out["full_vs_normal_p50"] = round(lv["full"]["per_proposal_ms_p50"] / base, 2) if base else None
    out["directory"] = str(directory or tempfile.gettempdir())
    return out
