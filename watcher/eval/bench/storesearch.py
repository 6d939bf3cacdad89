"""`compactd bench store-search`: archive search through the FTS5 index against the scan it replaced.

Builds two store files of ``entries`` archive entries of one agent (plus a tenth as many of another
agent, whose rows the search must skip), synthetic tool output of 1-4 sections of ~1.5 kB each:
one with the index (as it is: its indexer thread indexes each entry after the put commits, into the
index's own file since schema v4, watcher.store.fts) and one without it (its indexer stopped and its
triggers dropped, so writes cost what they did in v1), archived through ``Store.archive.put`` entry
by entry, the two interleaved; the searches start once the index holds every entry.
Then each query runs ``rounds`` times, interleaved, through the index and through the scan
(``Database.indexed`` off: the SQL main used before the index, ``instr(lower(text))`` over every
section of the agent, newest first):

* ``rare`` — a request id found in one section; ``common`` — a word in most sections (the first
  page fills from the newest); ``absent`` — a string found nowhere (the scan reads everything);
  ``phrase`` — two words across a space, in a few percent of the sections;
* ``short`` — a 2-character query: a scan of the newest entries (watcher.store.search), both ways.

Goals (exit 1 when missed): every query returns the same hits both ways; ``rare`` and ``absent``
are at least 10x faster through the index at >= 5000 entries. Also reported: the median and p99 of
one ``archive.put`` (on the caller's thread: the indexing is not in it since v3) and the file
size, with and without the index.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from ipc.sections import Section
from watcher.eval.bench.goals import BenchError, Goal, exercised, judge
from watcher.store.fts import index_path
from watcher.store.store import Store

_VOCABULARY: Final = (
    "error warning info debug request response timeout retry connection socket worker queue "
    "database index table column migration commit rollback checkpoint archive digest proposal "
    "section context budget token summary compaction pipeline build test deploy cache memory "
    "thread process signal handler module package import function class method argument value"
)
WORDS: Final = tuple(_VOCABULARY.split())
GOAL_SPEEDUP: Final = 10.0
GOAL_MIN_ENTRIES: Final = 5000


def _section(rnd: random.Random, n: int, i: int) -> Section:
    lines = []
    for k in range(18):
        words = " ".join(rnd.choice(WORDS) for _ in range(6))
        rid = f"req-{n:06d}{i}{k:02d}" if k == 7 else f"{rnd.getrandbits(24):06x}"
        lines.append(f"2026-11-24T12:{k:02d}:00 {words} id={rid} took {rnd.randint(1, 999)} ms")
    return Section(f"s{n}-{i}", "tool_result", "\n".join(lines), tokens=400)


def _build(stores: dict[str, Store], entries: int, seed: int) -> dict[str, list[float]]:
    rnd = random.Random(seed)
    put_ms: dict[str, list[float]] = {name: [] for name in stores}
    for n in range(entries + entries // 10):
        agent = "other" if n % 11 == 10 else "bench"
        secs = [_section(rnd, n, i) for i in range(rnd.randint(1, 4))]
        for name, store in stores.items():
            t0 = time.perf_counter()
            store.archive.put(agent, "default", f"a{n}", secs)
            put_ms[name].append((time.perf_counter() - t0) * 1000)
    return put_ms


def _size(path: str) -> int:
    """The store file and its index file (watcher.store.fts), where there is one."""
    index = Path(index_path(path))
    return Path(path).stat().st_size + (index.stat().st_size if index.exists() else 0)


def _time(store: Store, query: str, indexed: bool) -> tuple[float, list[tuple[str, int]]]:
    store.database.indexed = indexed
    t0 = time.perf_counter()
    hits, _ = store.archive.search("bench", query, limit=50)
    took = (time.perf_counter() - t0) * 1000
    return took, [(h.ref, h.pos) for h in hits]


def run_store_search(
    entries: int = 20000, rounds: int = 3, directory: Path | None = None, seed: int = 1
) -> dict[str, Any]:
    if entries < 100 or rounds < 1:
        raise BenchError("--entries must be at least 100 and --rounds at least 1")
    queries = {
        "rare": f"REQ-{entries // 2:06d}007",
        "common": "Timeout",
        "absent": "no such text anywhere",
        "phrase": "retry connection",
        "short": "zq",
    }
    with tempfile.TemporaryDirectory(prefix="compactd-search-", dir=directory) as tmp:
        stores = {
            "indexed": Store.open(Path(tmp) / "indexed.db", integrity_check=False),
            "unindexed": Store.open(Path(tmp) / "unindexed.db", integrity_check=False),
        }
        bare = stores["unindexed"].database
        if bare.indexer is not None:
            bare.indexer.close()
            bare.indexer = None
        for trigger in ("gone", "changed"):
            stores["unindexed"].db.execute(f"DROP TRIGGER originals_{trigger}")
        try:
            t0 = time.monotonic()
            put_ms = _build(stores, entries, seed)
            if not stores["indexed"].database.wait_indexed(600.0):
                raise BenchError("the search index did not catch up with the archive in 10 minutes")
            build_s = time.monotonic() - t0
            store = stores["indexed"]
            times: dict[str, dict[str, list[float]]] = {q: {"index": [], "scan": []} for q in queries}
            same: dict[str, bool] = {}
            hits: dict[str, int] = {}
            for _ in range(rounds):
                for name, query in queries.items():
                    a, by_index = _time(store, query, True)
                    b, by_scan = _time(store, query, False)
                    times[name]["index"].append(a)
                    times[name]["scan"].append(b)
                    same[name] = same.get(name, True) and by_index == by_scan
                    hits[name] = len(by_index)
            sizes = {name: _size(s.path) for name, s in stores.items()}
        finally:
            for s in stores.values():
                s.close()
    out: dict[str, Any] = {"entries": entries, "rounds": rounds, "build_s": round(build_s, 1), "queries": {}}
    for name, query in queries.items():
        idx, scan = statistics.median(times[name]["index"]), statistics.median(times[name]["scan"])
        out["queries"][name] = {
            "query": query,
            "hits": hits[name],
            "same_hits": same[name],
            "index_ms": {
                "median": round(idx, 3),
                "range": [round(min(times[name]["index"]), 3), round(max(times[name]["index"]), 3)],
            },
            "scan_ms": {
                "median": round(scan, 3),
                "range": [round(min(times[name]["scan"]), 3), round(max(times[name]["scan"]), 3)],
            },
            "speedup": round(scan / idx, 1) if idx else None,
        }
    out["put_ms"] = {name: _p50_p99(ms) for name, ms in put_ms.items()}
    out["file_bytes"] = sizes
    goals = [
        Goal(f"{name}: same hits through the index and the scan", same[name], "==", True) for name in queries
    ]
    big = entries >= GOAL_MIN_ENTRIES  # the speed goals need a large archive: else not exercised
    goals += [
        Goal(f"{name}: speedup", exercised(out["queries"][name]["speedup"], big), ">=", GOAL_SPEEDUP)
        for name in ("rare", "absent")
    ]
    return judge(out, goals)


def _p50_p99(ms: list[float]) -> dict[str, float]:
    s = sorted(ms)
    return {"p50": round(statistics.median(s), 3), "p99": round(s[max(0, int(len(s) * 0.99) - 1)], 3)}
