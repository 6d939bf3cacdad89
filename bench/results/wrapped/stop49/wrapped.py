"""Real tool outputs wrapped in JSON as agents record them, through one tree's `compress()`.

Each output (this repository's `git log -p -3 03083ec`, `git diff 03083ec~3 03083ec`, `ls -la
/usr/bin`, `grep -rn "def " summarizer` at 03083ec, a failing pytest run) is compressed bare and
wrapped two ways: Codex CLI's `{"output", "metadata": {"exit_code", "duration_seconds"}}` and a
sandbox's `{"stdout", "stderr", "returncode"}`. Per output and wrapping: the tokens of the rendering,
the share of the bare rendering's lines the wrapped rendering shows, and whether the exit code's
value is shown (a document kept whole, because no rendering of it is shorter, shows all).

From a tree's root: PYTHONPATH=TREE .venv/bin/python -P bench/results/wrapped/stop49/wrapped.py REPO
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from summarizer.compress import compress
from summarizer.tokenizer import load_counter
from watcher.runtime.paths import default_model_path

TEST = """
def test_totals():
    for scale in range(40):
        assert 3 * scale == 3 * scale + (scale == 17), f"scale {scale}"
"""


def main() -> None:
    repo = sys.argv[1]
    count = load_counter(str(default_model_path()))
    scratch = Path(tempfile.mkdtemp())
    (scratch / "test_totals.py").write_text(TEST)
    runs = {
        "git log -p -3": (["git", "-C", repo, "log", "-p", "-3", "03083ec"], None),
        "git diff": (["git", "-C", repo, "diff", "03083ec~3", "03083ec"], None),
        "ls -la": (["ls", "-la", "/usr/bin"], None),
        "grep -rn": (["git", "-C", repo, "grep", "-n", "def ", "03083ec", "--", "summarizer"], None),
        "pytest": ([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_totals.py"], scratch),
    }
    report = {}
    for name, (cmd, cwd) in runs.items():
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
        raw, code = done.stdout, done.returncode
        bare = [ln for ln in compress(raw, ref="a#s1").text.split("\n") if ln.strip()]
        row = {"bare_tokens": count(compress(raw, ref="a#s1").text)}
        for label, doc in (
            ("codex", {"output": raw, "metadata": {"exit_code": code, "duration_seconds": 1.5}}),
            ("sandbox", {"stdout": raw, "stderr": "", "returncode": code}),
        ):
            text = compress(json.dumps(doc), ref="a#s1").text
            whole = text == json.dumps(doc)  # kept as it is: no rendering is shorter
            lines = set(text.split("\n"))
            row[label] = {
                "tokens": count(text),
                "whole": whole,
                "bare_lines_shown": 1.0 if whole else round(sum(ln in lines for ln in bare) / len(bare), 3),
                "exit_code_shown": whole or f'"exit_code":{code}' in text or f"returncode: {code}" in text,
            }
        report[name] = row
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
