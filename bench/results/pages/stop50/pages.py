"""Real HTML pages as a tool fetches them, through one tree's `compress()` and deterministic digest.

The pages are what this machine has or serves (nothing is committed): rustdoc pages of the Rust
standard library and mdbook pages of the rustdoc book (rustup's docs), Debian's HTML manuals
(`/usr/share/doc`), Python's IDLE help (Sphinx), a page `pydoc -w` writes, and a directory listing
`python -m http.server` serves, fetched with `curl -i` (HTTP headers, then the page). A page that is
not on the machine is skipped and named.

What a rendering keeps is judged by regular expressions over the raw markup, not by the parser the
compressor uses: the headings (`<h1>`..`<h6>`, tags stripped, entities decoded) and the distinct
words of 4+ letters of the paragraphs (`<p>`), each counted as kept when the rendering holds it;
and the share of the rendering's lines that carry markup (`<tag`). Per page, for `compress()` and
for a digest at 1 000 tokens (`summarizer.digest.Summarizer(None)`): tokens, headings kept, words
kept, markup lines.

From a tree's root: PYTHONPATH=TREE .venv/bin/python -P bench/results/pages/stop50/pages.py OUT.json
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from summarizer.compress import compress
from summarizer.digest import Item, Summarizer
from summarizer.tokenizer import load_counter
from watcher.runtime.paths import default_model_path

RUST = next(Path("/root/.rustup/toolchains").glob("*/share/doc/rust/html"), Path("/nonexistent"))
FILES = {
    "rustdoc Vec": RUST / "std/vec/struct.Vec.html",
    "rustdoc HashMap": RUST / "std/collections/struct.HashMap.html",
    "rustdoc std::fs": RUST / "std/fs/index.html",
    "mdbook lints": RUST / "rustdoc/lints.html",
    "mdbook doctests": RUST / "rustdoc/write-documentation/documentation-tests.html",
    "texinfo bzip2": Path("/usr/share/doc/bzip2/manual.html"),
    "gcc NEWS": Path("/usr/share/doc/gcc-12-base/NEWS.html"),
    "bc manual": Path("/usr/share/doc/bc/bc.html"),
    "sphinx IDLE help": Path(sys.base_prefix) / "lib/python3.11/idlelib/help.html",
}
_HEADING = re.compile(r"<h([1-6])\b[^>]*>(.*?)</h\1\s*>", re.I | re.S)
_PARA = re.compile(r"<p\b[^>]*>(.*?)</p\s*>", re.I | re.S)
_TAGS = re.compile(r"<[^>]*>")
_WORD = re.compile(r"[^\W\d_]{4,}")
# a tag of HTML (not `Vec<T>` in a rustdoc signature, not a decoded `&lt;url&gt;`)
_MARKUP = re.compile(
    r"</?(?:html|head|body|div|span|p|a|td|tr|table|font|strong|em|code|pre|dl|dt|dd|ul|ol|li|h\d|meta|link"
    r"|script|style|section|nav|main|header|footer|button|img|br|hr|!DOCTYPE)\b",
    re.I,
)


def _text(fragment: str) -> str:
    return " ".join(html.unescape(_TAGS.sub(" ", fragment)).split())


def _bare(fragment: str) -> str:
    return "".join(html.unescape(_TAGS.sub("", fragment)).split())


def _served(scratch: Path) -> dict[str, str]:
    """`pydoc -w json` and http.server's listing of /usr/share/doc, fetched with curl -i."""
    out: dict[str, str] = {}
    pydoc = [sys.executable, "-m", "pydoc", "-w", "json"]
    subprocess.run(pydoc, cwd=scratch, check=True, capture_output=True)
    out["pydoc json"] = (scratch / "json.html").read_text()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve = ["-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", "/usr/share/doc"]
    server = subprocess.Popen(
        [sys.executable, *serve],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            url = f"http://127.0.0.1:{port}/"
            got = subprocess.run(["curl", "-si", url], check=False, capture_output=True, text=True)
            if got.returncode == 0:
                out["curl -i http.server"] = got.stdout
                break
            time.sleep(0.1)
    finally:
        server.terminate()
        server.wait(10)
    return out


def measure(raw: str, shown: str) -> dict[str, float]:
    heads = {_bare(m[2]) for m in _HEADING.finditer(raw)} - {""}
    words = {w for m in _PARA.finditer(raw) for w in _WORD.findall(_text(m[1]))}
    bare = "".join(shown.split())  # headings compared without whitespace: inline tags split words
    have = set(_WORD.findall(shown))
    lines = [ln for ln in shown.split("\n") if ln.strip()]
    return {
        "headings": len(heads),
        "headings_kept": round(sum(h in bare for h in heads) / len(heads), 3) if heads else 1.0,
        "words": len(words),
        "words_kept": round(len(words & have) / len(words), 3) if words else 1.0,
        "markup_lines": round(sum(bool(_MARKUP.search(ln)) for ln in lines) / max(1, len(lines)), 3),
    }


async def main() -> dict[str, object]:
    count = load_counter(str(default_model_path()))
    pages = {name: p.read_text(errors="replace") for name, p in FILES.items() if p.exists()}
    missing = [name for name, p in FILES.items() if not p.exists()]
    pages.update(_served(Path(tempfile.mkdtemp())))
    summ = Summarizer(None, count=count)
    report: dict[str, object] = {"missing": missing}
    for name, raw in pages.items():
        text = compress(raw, ref="a#s1").text
        tokens = count(raw)
        digest = (await summ.digest([Item("s1", "tool_result", raw, tokens)], "a1", 1000)).text
        report[name] = {
            "chars": len(raw),
            "tokens": tokens,
            "compress": {"tokens": count(text), **measure(raw, text)},
            "digest_1000": {"tokens": count(digest), **measure(raw, digest)},
        }
        print(name, json.dumps(report[name]), flush=True)
    return report


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(asyncio.run(main()), indent=1) + "\n")
