"""Tables aligned with spaces: which outputs change kind, and what a table then says.

Real outputs of programs on this machine (those present; skipped ones are named), plus every tool
output of ../shared/trajectories and every CILogBench log: each detected with and without
`summarizer.detect.aligned_columns` (turned off in this process), so the difference is exactly
this rule's. For outputs that become tables: the columns named by a column line (`NAME: ...`).

From a tree's root: PYTHONPATH=TREE .venv/bin/python -P bench/results/tables/stop50/aligned.py OUT.json
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from summarizer import detect as detection
from summarizer.compress import compress
from watcher.eval.trajectories import load_many

SHARED = Path(__file__).resolve().parents[4].parent / "shared"
COMMANDS = [
    "pip list",
    "pip list -v",
    "ps -ef",
    "ps aux",
    "df -h",
    "df -P",
    "lsof -n",
    "ss -tan",
    "netstat -tan",
    "free -h",
    "mount",
    "env",
    "ls -la /usr/bin",
    "ls -laR /usr/share/doc",
    "dpkg -l",
    "git log --oneline -300",
    "git log -p -3",
    "git status",
    "git branch -vv",
    "cat /etc/passwd",
    "cat /etc/services",
    "cat /proc/meminfo",
    "top -bn1",
    "vmstat 1 2",
    "column -t /etc/fstab",
    "find /usr/share/doc -name *.html",
    "grep -rn import watcher",
    "python -m pydoc json",
    "cat -n summarizer/detect.py",
]


def _kinds(text: str) -> tuple[str, str]:
    new = detection.detect(text)
    keep = detection.aligned_columns
    detection.aligned_columns = lambda lines: None  # type: ignore[assignment]
    try:
        old = detection.detect(text)
    finally:
        detection.aligned_columns = keep
    return old, new


def main() -> dict[str, object]:
    programs: dict[str, object] = {}
    skipped = []
    for command in COMMANDS:
        argv = command.split()
        if argv[0] == "python":
            argv[0] = sys.executable
        elif shutil.which(argv[0]) is None:
            skipped.append(command)
            continue
        done = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False)
        text = "\n".join((done.stdout + done.stderr).split("\n")[:3000])
        old, new = _kinds(text)
        row: dict[str, object] = {"before": old, "after": new}
        if new == "table" and old != "table":
            shown = compress(text, ref="a#s1").text.split("\n")
            row["header"] = shown[0]
            row["columns"] = [ln.split(": ", 1)[0] for ln in shown[2:] if ": " in ln and " value" in ln]
        programs[command] = row
    paths = sorted(
        p for p in (SHARED / "trajectories").rglob("*") if p.suffix in (".json", ".jsonl", ".traj")
    )
    shared = [s.text for t in load_many(paths) for s in t.sections]
    shared += [p.read_text(errors="replace") for p in sorted((SHARED / "cilogbench").rglob("raw.log"))]
    changed = sum(1 for text in shared if len(set(_kinds(text))) > 1)
    return {
        "programs": programs,
        "skipped": skipped,
        "changed_programs": sum(
            1 for r in programs.values() if isinstance(r, dict) and r["before"] != r["after"]
        ),
        "shared_texts": len(shared),
        "shared_changed": changed,
    }


if __name__ == "__main__":
    report = main()
    Path(sys.argv[1]).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "programs"}))
    for command, row in report["programs"].items():  # type: ignore[union-attr]
        print(f"{command:28} {row}")
