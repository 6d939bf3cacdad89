"""Real Markdown documents read whole (`cat README.md`), through one tree's `compress()` and a
deterministic digest at 1 000 tokens.

The documents are what this machine has: pyenv's READMEs, rustup's clippy and rustfmt READMEs, and
this repository's README and docs at the tree's own commit (`git show COMMIT:PATH`, so both trees
read the same bytes). A document that is not on the machine is skipped and named.

What is kept: the headings (ATX `#` lines outside fenced code), shown as whole lines (a digest's
indent aside); the distinct
words of 4+ letters of the other lines outside fences, found in the rendering. Per document:
tokens, then headings and words kept, for `compress()` and for the digest.

From a tree's root:
PYTHONPATH=TREE .venv/bin/python -P bench/results/pages/stop50/markdown.py REPO COMMIT OUT.json
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

from summarizer.compress import compress
from summarizer.digest import Item, Summarizer
from summarizer.tokenizer import load_counter
from watcher.runtime.paths import default_model_path

FILES = {
    "pyenv README": Path("/root/.pyenv/README.md"),
    "pyenv python-build README": Path("/root/.pyenv/plugins/python-build/README.md"),
    "pyenv-virtualenv README": Path("/root/.pyenv/plugins/pyenv-virtualenv/README.md"),
}
RUST = next(Path("/root/.rustup/toolchains").glob("stable-*/share/doc"), Path("/nonexistent"))
FILES |= {"clippy README": RUST / "clippy/README.md", "rustfmt README": RUST / "rustfmt/README.md"}
REPO_DOCS = ("README.md", "docs/PROTOCOL.md", "docs/ARCHITECTURE.md")
_HEADING = re.compile(r"#{1,6}[ \t]+\S")
_WORD = re.compile(r"[^\W\d_]{4,}")


def measure(doc: str, shown: str) -> dict[str, float]:
    heads: list[str] = []
    words: set[str] = set()
    fenced = False
    for line in doc.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and _HEADING.match(line):
            heads.append(line.strip())
        elif not fenced:
            words |= set(_WORD.findall(line))
    lines = {ln.strip() for ln in shown.split("\n")}  # (a digest indents a section's lines)
    have = set(_WORD.findall(shown))
    return {
        "headings": len(heads),
        "headings_kept": round(sum(h in lines for h in heads) / len(heads), 3) if heads else 1.0,
        "words_kept": round(len(words & have) / len(words), 3) if words else 1.0,
    }


def documents(repo: str, commit: str) -> dict[str, str]:
    docs = {name: p.read_text() for name, p in FILES.items() if p.exists()}
    for path in REPO_DOCS:
        show = ["git", "-C", repo, "show", f"{commit}:{path}"]
        docs[f"compactd {path}"] = subprocess.run(show, check=True, capture_output=True, text=True).stdout
    return docs


async def main(docs: dict[str, str], commit: str) -> dict[str, object]:
    count = load_counter(str(default_model_path()))
    summ = Summarizer(None, count=count)
    report: dict[str, object] = {"missing": [n for n, p in FILES.items() if not p.exists()], "commit": commit}
    for name, doc in docs.items():
        out = compress(doc, ref="a#s1")
        tokens = count(doc)
        digest = (await summ.digest([Item("s1", "tool_result", doc, tokens)], "a1", 1000)).text
        report[name] = {
            "kind": out.kind,
            "tokens": tokens,
            "compress": {"tokens": count(out.text), **measure(doc, out.text)},
            "digest_1000": {"tokens": count(digest), **measure(doc, digest)},
        }
    return report


if __name__ == "__main__":
    result = asyncio.run(main(documents(sys.argv[1], sys.argv[2]), sys.argv[2]))
    Path(sys.argv[3]).write_text(json.dumps(result, indent=1) + "\n")
