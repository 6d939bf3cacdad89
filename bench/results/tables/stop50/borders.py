"""Tables a database shell prints between borders, through one tree's `compress()`.

The `sqlite3` shell prints one real query (2 000 jobs: id, queue, status, attempts, wall_ms) in each
of its table modes: `-table` (`+----+` rules, `| a |` borders, as `mysql` prints), `-markdown`
(`|---|` under the header), `-box` (box-drawing characters) and, for comparison, `-header
-separator '|'` (no borders). Per mode: the kind, tokens in and out, whether the header row, the
first and the last data rows are shown, the share of the 5 column names that a column line names
(`name: N values ...`), and the share of the columns whose values or range are given.

From a tree's root: PYTHONPATH=TREE .venv/bin/python -P bench/results/tables/stop50/borders.py OUT.json
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from summarizer.compress import compress
from summarizer.tokenizer import load_counter
from watcher.runtime.paths import default_model_path

MODES = {
    "-table": ["-table"],
    "-markdown": ["-markdown"],
    "-box": ["-box"],
    "-separator '|'": ["-header", "-separator", "|"],
}
COLUMNS = ("id", "queue", "status", "attempts", "wall_ms")
ROWS = 2000


def _db(root: Path) -> Path:
    path = root / "jobs.db"
    db = sqlite3.connect(path)
    statuses = ("done", "failed", "retrying")
    with db:
        db.execute("CREATE TABLE jobs (id INTEGER, queue TEXT, status TEXT, attempts INTEGER, wall_ms REAL)")
        db.executemany(
            "INSERT INTO jobs VALUES (?, ?, ?, ?, ?)",
            [(i, f"q{i % 3}", statuses[i % 7 % 3], i % 5, 12.5 + i * 0.75) for i in range(ROWS)],
        )
    db.close()
    return path


def _data_row(line: str, first: str) -> bool:
    return re.match(rf"[\s|│]*{first}\b", line) is not None


def main() -> dict[str, object]:
    count = load_counter(str(default_model_path()))
    rows: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = _db(Path(tmp))
        for name, args in MODES.items():
            text = subprocess.run(
                ["sqlite3", *args, str(db), "SELECT * FROM jobs ORDER BY id"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            lines = text.split("\n")
            out = compress(text, ref="a#s1")
            shown = out.text.split("\n")
            header = next(ln for ln in lines if "queue" in ln)
            rows[name] = {
                "kind": out.kind,
                "tokens": count(text),
                "tokens_after": count(out.text),
                "header_row": header in shown,
                "first_row": any(_data_row(ln, "0") for ln in shown),
                "last_row": any(_data_row(ln, str(ROWS - 1)) for ln in shown),
                "columns_described": sum(any(ln.startswith(f"{c}: ") for ln in shown) for c in COLUMNS)
                / len(COLUMNS),
            }
    return {"rows": ROWS, "modes": rows}


if __name__ == "__main__":
    report = main()
    Path(sys.argv[1]).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))
