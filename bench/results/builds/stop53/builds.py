"""Real failing builds at 1/8 (tests/fixtures/builds.py, tests/summarizer/test_builds.py's cases):
the signals each digest keeps, its tokens, and how many names of the run's generated family its key
facts and names line list. Run from a tree's root: PYTHONPATH=TREE python builds.py

The runs are made once, in a scratch directory, and read from there by both trees (make the runs
with one tree, then digest with each: ``--keep DIR`` writes them, ``--from DIR`` reads them).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from summarizer.digest import Item, Summarizer
from summarizer.frame import FACTS_LABEL, unquoted
from summarizer.layout import NAMES_LABEL
from tests.summarizer.test_builds import CASES


def output(run: Callable[[Path], str], slug: str, src: str | None, keep: str | None) -> str:
    """The run's output: read from `src`, or made now (and written to `keep`)."""
    if src:
        return (Path(src) / f"{slug}.txt").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        text = run(Path(tmp))
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{slug}.txt").write_text(text)
    return text


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="write the runs' outputs here")
    ap.add_argument("--from", dest="src", help="read the runs' outputs from here")
    args = ap.parse_args()
    total = kept = 0
    for name, (run, signals, family) in CASES.items():
        slug = name.replace(" ", "_").replace("-", "")
        text = output(run, slug, args.src, args.keep)
        summ = Summarizer(None)
        item = Item("s1", "tool_result", text, summ.count(text))
        d = await summ.digest([item], "a1", item.tokens // 8)
        have = [s for s in signals if s in d.text]
        listed = " ".join(ln for ln in d.text.split("\n") if ln.startswith((FACTS_LABEL, NAMES_LABEL)))
        members = len(re.findall(family, listed))
        total += len(signals)
        kept += len(have)
        missing = [s for s in signals if s not in have]
        print(
            f"{name:12} tokens {item.tokens:6d} -> {d.tokens:5d}  signals {len(have)}/{len(signals)}"
            f"  family listed {members:3d}  unquoted {len(unquoted(d.text, [item]))}  missing {missing}"
        )
    print(f"all: signals {kept}/{total}")


asyncio.run(main())
