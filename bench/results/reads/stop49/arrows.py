"""File reads numbered with an arrow (Claude Code's Read tool: `     1→code`) against `cat -n`.

Every Python file of compactd at 03083ec of more than 100 lines, read both ways; per format: the
kinds `compress()` detects, the tokens of the renderings, and the share of the files' `def` and
`class` lines the rendering still shows (the outline a file read is compressed to).

From a tree's root, REPO a clone of compactd that has 03083ec:
PYTHONPATH=TREE .venv/bin/python -P bench/results/reads/stop49/arrows.py REPO
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter

from summarizer.compress import Renderer
from summarizer.tokenizer import load_counter
from watcher.runtime.paths import default_model_path

AT = "03083ec"
_DEF = re.compile(r"\s*(?:async\s+)?(?:def|class)\s+\w+")


def main() -> None:
    repo = sys.argv[1]
    count = load_counter(str(default_model_path()))

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout

    files = [f for f in git("ls-tree", "-r", "--name-only", AT).split() if f.endswith(".py")]
    report = {}
    for sep, label in (("\t", "cat -n"), ("→", "arrows")):
        kinds: Counter[str] = Counter()
        tokens = defs = shown = n = 0
        for f in files:
            lines = git("show", f"{AT}:{f}").split("\n")
            if len(lines) <= 100:
                continue
            n += 1
            read = "\n".join(f"{i + 1:>6}{sep}{ln}" for i, ln in enumerate(lines))
            r = Renderer(read, ref="a#s1")
            text = r.render().text
            kinds[r.kind] += 1
            tokens += count(text)
            wanted = [f"{i + 1:>6}{sep}{ln}" for i, ln in enumerate(lines) if _DEF.match(ln)]
            defs += len(wanted)
            shown += sum(w in text for w in wanted)
        report[label] = {"files": n, "kinds": dict(kinds), "tokens": tokens, "defs_shown": [shown, defs]}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
