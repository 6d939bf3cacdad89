"""What `compress()` keeps of a real history with patches: this repository's own, at a fixed commit.

For `git log -p --stat -N 03083ec` (N = 1, 3, 10) and `git show 03083ec`: the tokens in and out, and
how many of the commits' ids, subjects, authors and stat summaries the rendering still holds.

From a tree's root, in a clone of compactd that has 03083ec:
PYTHONPATH=TREE .venv/bin/python -P bench/results/history/stop49/history.py [REPO]
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from summarizer.compress import compress
from summarizer.tokenizer import load_counter
from watcher.runtime.paths import default_model_path

AT = "03083ec"


def main() -> None:
    repo = sys.argv[1] if len(sys.argv) > 1 else "."
    count = load_counter(str(default_model_path()))

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout

    report = {}
    for label, args, n in [
        ("git show", ["show", AT], 1),
        *((f"git log -p --stat -{k}", ["log", "-p", "--stat", f"-{k}", AT], k) for k in (1, 3, 10)),
    ]:
        out = git(*args)
        text = compress(out, ref="a#s1").text
        shas = git("log", "--format=%H", f"-{n}", AT).split()
        subjects = git("log", "--format=%s", f"-{n}", AT).split("\n")[:n]
        stats = re.findall(r"^ \d+ files? changed.*$", out, re.M)
        report[label] = {
            "tokens": [count(out), count(text)],
            "commit_ids": [sum(f"commit {s}" in text for s in shas), n],
            "subjects": [sum(s[:60] in text for s in subjects), n],
            "authors": [text.count("\nAuthor: "), out.count("\nAuthor: ")],
            "stat_summaries": [sum(s in text for s in stats), len(stats)],
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
