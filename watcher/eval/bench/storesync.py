"""`compactd bench store-sync`: what each ``PRAGMA synchronous`` level costs a proposal's store work.

One proposal's life in the store is four commits: archive the originals, record it planned, mark it
sent (all before it leaves the daemon), and mark it acked. At level ``normal`` compactd also fsyncs
the WAL once between "sent" and the send (the point of no return; one fsync covers the archive and
the proposal), in a thread, so the event loop is not blocked by it. This times exactly that
sequence through watcher.store.store.Store on real files in the given directory (the disk the state
directory is on matters: fsync is the cost), for each level side by side, interleaved round-robin
so that disk noise hits every level alike:

* ``loop_ms`` — time the daemon's event loop is blocked (the four commits);
* ``until_sent_ms`` — time until the proposal may leave (commits + the WAL fsync, if any);
* ``normal_without_sync_point`` is plain SQLite NORMAL (no fsync at all), for comparison.

The proposals are measured in ``rounds`` (interleaved: every round runs every level); the ratios
are reported as median and range over the rounds. Goals: the sync point keeps the event loop free
(``normal``'s loop time p50 at most 1.5x plain NORMAL's), and a proposal leaves sooner at
``normal`` than at ``full`` (until_sent p50 ratio full / normal above 1).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from ipc.protocol import Proposal
from ipc.sections import Section
from watcher.eval.bench.goals import BenchError, Goal, judge, spread
from watcher.store.store import SYNCHRONOUS_LEVELS, Store

SECTION_CHARS: Final = 2000
SECTIONS: Final = 8
NORMAL_NO_SYNC_POINT: Final = "normal_without_sync_point"


def _region(n: int) -> tuple[Section, ...]:
    text = ("def f(x):\n    return x * 2  # some tool output line\n" * 60)[:SECTION_CHARS]
    return tuple(Section(f"s{n}-{i}", "tool_result", f"{n}:{i}:{text}", tokens=600) for i in range(SECTIONS))


def _one(store: Store, n: int) -> tuple[float, float]:
    """One proposal's store work; returns (seconds on the loop, seconds until it may be sent)."""
    originals = _region(n)
    ref, pid = f"a{n}", f"p{n}"
    digest = Section(f"d{n}", "digest", "digest text " * 40, tokens=120, meta={"archive": ref})
    p = Proposal(pid, n, tuple(s.id for s in originals), (digest,), 4800, 120, 4800, (ref,))
    t0 = time.perf_counter()
    store.archive.put("bench", "default", ref, originals)
    store.proposals.record("bench", "default", p, "deterministic")
    store.proposals.transition("bench", pid, "sent")
    t1 = time.perf_counter()
    store.sync_wal()  # the server runs this in a thread
    t2 = time.perf_counter()
    store.proposals.transition("bench", pid, "acked", version=n + 1)  # later, when the ACK comes
    t3 = time.perf_counter()
    return (t1 - t0) + (t3 - t2), t2 - t0


def _summary(ms: list[float]) -> dict[str, float]:
    s = sorted(ms)
    return {"p50": round(statistics.median(s), 3), "p99": round(s[max(0, int(len(s) * 0.99) - 1)], 3)}


def run_store_sync(proposals: int = 200, directory: Path | None = None, rounds: int = 3) -> dict[str, Any]:
    if proposals < 10:
        raise BenchError("--proposals must be at least 10")
    if not 1 <= rounds <= proposals // 10:
        raise BenchError("--rounds must be in 1..proposals/10")
    per = proposals // rounds
    with tempfile.TemporaryDirectory(prefix="compactd-sync-", dir=directory) as tmp:
        stores = {
            level: Store.open(Path(tmp) / f"{level}.db", synchronous=level, integrity_check=False)
            for level in SYNCHRONOUS_LEVELS
        }
        plain = Store.open(Path(tmp) / "plain.db", synchronous="normal", integrity_check=False)
        plain.database.sync_points = False
        stores[NORMAL_NO_SYNC_POINT] = plain
        loop: dict[str, list[float]] = {level: [] for level in stores}
        sent: dict[str, list[float]] = {level: [] for level in stores}
        try:
            for n in range(per * rounds):
                for level, store in stores.items():
                    a, b = _one(store, n)
                    loop[level].append(a * 1000)
                    sent[level].append(b * 1000)
        finally:
            for store in stores.values():
                store.close()
    out: dict[str, Any] = {
        "proposals": per * rounds,
        "rounds": rounds,
        "commits_per_proposal": 4,
        "levels": {},
    }
    for level in stores:
        out["levels"][level] = {"loop_ms": _summary(loop[level]), "until_sent_ms": _summary(sent[level])}

    def ratio(a: list[float], b: list[float]) -> list[float]:
        chunks = [slice(k * per, (k + 1) * per) for k in range(rounds)]
        return [statistics.median(a[c]) / statistics.median(b[c]) for c in chunks if statistics.median(b[c])]

    out["full_vs_normal_until_sent_p50"] = spread(ratio(sent["full"], sent["normal"]), 2)
    out["normal_vs_plain_loop_p50"] = spread(ratio(loop["normal"], loop[NORMAL_NO_SYNC_POINT]), 2)
    out["directory"] = str(directory or tempfile.gettempdir())
    return judge(
        out,
        [
            Goal(
                "normal loop p50 / plain NORMAL loop p50",
                out["normal_vs_plain_loop_p50"]["median"],
                "<=",
                1.5,
            ),
            Goal(
                "full until_sent p50 / normal until_sent p50",
                out["full_vs_normal_until_sent_p50"]["median"],
                ">",
                1.0,
            ),
        ],
    )
