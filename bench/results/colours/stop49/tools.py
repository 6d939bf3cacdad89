"""Real programs' output with colours forced on and off, through one tree's compressors and digest.

Each program runs twice in a scratch git repository: plain (`--color=never`, pytest `--color=no`)
and coloured (`--color=always`, pytest `--color=yes`, as a terminal, CI with FORCE_COLOR or an agent
that asks for colours gets). Per program: the tokens of the rendering (`compress()`), whether the
coloured rendering equals the plain one, escape bytes left in it, and, for a deterministic digest of
the four outputs (1/8 of their tokens), the names and key facts that are no word of the plain
outputs (a colour code glued to a word: `mFAILED`, `31mtest_x.py`) and the escapes in it.

From a tree's root: PYTHONPATH=TREE .venv/bin/python -P bench/results/colours/stop49/tools.py
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from summarizer.compress import compress
from summarizer.digest import Item, Summarizer
from summarizer.tokenizer import load_counter
from watcher.runtime.paths import default_model_path

TEST = """
import pytest


def helper_value(scale):
    return 3 * scale


@pytest.mark.parametrize("scale", range(40))
def test_scaled_total(scale):
    assert helper_value(scale) == 3 * scale + (scale == 17)


def test_parse_header():
    raise ValueError("header_line missing in build_report.txt")
"""


def repo() -> Path:
    root = Path(tempfile.mkdtemp())
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", "."], cwd=root, check=True)
    lines = [f"value_{i} = compute_total({i}, scale=2)  # line {i} of the module" for i in range(400)]
    (root / "module.py").write_text("\n".join(lines) + "\n")
    subprocess.run([*git, "add", "module.py"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=root, check=True)
    changed = [ln.replace("scale=2", "scale=3") if 100 <= i < 130 else ln for i, ln in enumerate(lines)]
    (root / "module.py").write_text("\n".join(changed) + "\n")
    (root / "test_scaled.py").write_text(TEST)
    return root


PROGRAMS = {
    "git diff": ["git", "diff", "--color=never"],
    "grep -n": ["grep", "--color=never", "-n", "compute_total(1", "module.py"],
    "ls -la": ["ls", "--color=never", "-la", "/usr/bin"],
    "pytest": [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--color=no",
        "test_scaled.py",
    ],
}


def run(cmd: list[str], root: Path, coloured: bool) -> str:
    if coloured:
        cmd = [c.replace("=never", "=always").replace("--color=no", "--color=yes") for c in cmd]
    return subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=120, check=False).stdout


def main() -> None:
    count = load_counter(str(default_model_path()))
    root = repo()
    outs = {name: (run(cmd, root, False), run(cmd, root, True)) for name, cmd in PROGRAMS.items()}
    report: dict[str, object] = {}
    for name, (plain, coloured) in outs.items():
        p, c = compress(plain, ref="a#s1").text, compress(coloured, ref="a#s1").text
        report[name] = {
            "input_tokens": [count(plain), count(coloured)],
            "rendering_tokens": [count(p), count(c)],
            "same_as_plain": p == c,
            "escapes_left": c.count("\x1b"),
        }
    text = "\n".join(plain for plain, _ in outs.values())

    def foreign(name: str) -> bool:  # not a whole word of the plain outputs
        return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text) is None

    for label, which in (("plain", 0), ("coloured", 1)):
        items = [Item(f"s{k}", "tool_result", o[which], count(o[which])) for k, o in enumerate(outs.values())]
        before = sum(it.tokens for it in items)
        d = asyncio.run(Summarizer(None, count=count).digest(items, "a#d1", before // 8))
        lines = d.text.split("\n")
        names = next((ln.split(": ", 1)[1].split() for ln in lines if ln.startswith("Names")), [])
        facts = next((ln.split(": ", 1)[1].split(" | ") for ln in lines if ln.startswith("Key facts")), [])
        report[f"digest ({label})"] = {
            "tokens": d.tokens,
            "names": len(names),
            "names_not_words_of_the_plain_outputs": len(bad := [n for n in names if foreign(n)]),
            "examples": bad[:8],
            "facts_with_escapes_or_codes": [f for f in facts if "\x1b" in f or re.search(r"\[\d+m", f)],
            "escapes": d.text.count("\x1b"),
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
