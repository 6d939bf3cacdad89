"""Time `summarizer.compress.markup.page_lines` on pages with constructs left open.

HTMLParser searches for the end of an open construct again from each `<` after it, to the end of
the page. Each case is a short page followed by `unit * n` (and `tail`), at n and 2n, each in its
own subprocess with a time limit, so a quadratic case shows as a ~4x step or a timeout.
Run from a tree's root: PYTHONPATH=TREE .venv/bin/python -P bench/results/pages/stop50/open_constructs.py
Prints one JSON object: {case: [seconds at n, seconds at 2n]} (null: over the limit; "raised X":
page_lines raised X).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

LIMIT_S = 60.0
CASES = {  # name: (unit, n, tail)
    "`</` no `>` after": ("a </ b ", 100_000, ""),
    "`<a ` no `>` after": ("<a ", 10_000, ""),
    "`<a b='` no `>` after": ("<a b='", 10_000, ""),
    "`<?` no `>` after": ("<?", 20_000, ""),
    "`<!-- x>` unclosed comments": ("<!-- x>", 20_000, "<p>after</p>"),
    "`<![CDATA[>` unclosed sections": ("<![CDATA[>", 20_000, "<p>after</p>"),
    "`<![if>` unclosed sections": ("<![if>", 20_000, "<p>after</p>"),
    "well-formed `<p>x</p>`": ("<p>x</p>", 100_000, ""),
}
CHILD = """
import sys, time
from summarizer.compress.markup import page_lines
unit, n, tail = sys.argv[1], int(sys.argv[2]), sys.argv[3]
page = "<html><body><h1>Open</h1><p>x</p>" + unit * n + tail
t = time.perf_counter()
try:
    page_lines(page)
except Exception as e:
    print("raised", type(e).__name__)
    raise SystemExit(0)
print(time.perf_counter() - t)
"""


def timed(unit: str, n: int, tail: str) -> float | str | None:
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, unit, str(n), tail],
            capture_output=True,
            text=True,
            timeout=LIMIT_S,
            check=True,
        ).stdout.strip()
    except subprocess.TimeoutExpired:
        return None
    return out if out.startswith("raised") else round(float(out), 3)


def main() -> None:
    started = time.perf_counter()
    result = {
        name: [timed(unit, n, tail), timed(unit, 2 * n, tail)] for name, (unit, n, tail) in CASES.items()
    }
    result["`<![ifb]>`, a name HTMLParser does not know"] = [timed("<![ifb]><p>kept</p>", 1, "")]
    print(
        json.dumps({"limit_s": LIMIT_S, "cases": result, "wall_s": round(time.perf_counter() - started, 1)})
    )


if __name__ == "__main__":
    main()
