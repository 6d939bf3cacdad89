"""Rows that hold a rare value: what a table's rendering shows with them and without them.

A table's rendering shows its ends and, since this change, the rows holding a value few rows hold
in a column of few values (`summarizer.compress.table._rare_rows`: the failed job among thousands,
the one process of another user). Each table is rendered with the rule and without it (turned off
in this process). Per table: the rows holding such a value, how many of them each rendering
shows, and the tokens of each. Tables: a real SQLite query of 2 000 jobs of which 3 failed and 2
were cancelled (printed by the `sqlite3` shell, tab-separated and `-box`), `ps -ef` and `pip list
-v` on this machine, and the 33 real tables of `tables.py`.

From a tree's root: PYTHONPATH=TREE .venv/bin/python -P bench/results/tables/stop50/rare.py OUT.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy

from summarizer.compress import compress
from summarizer.compress import table as table_module
from summarizer.detect import table_lines
from summarizer.tokenizer import load_counter
from tests.fixtures.query import jobs_failing
from watcher.runtime.paths import default_model_path

FAILED, CANCELLED = (311, 1207, 1850), (64, 999)


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False).stdout


def _rare_lines(text: str) -> list[str]:
    """The lines of `text` holding a rare value, by the rule itself (its rows, mapped to lines)."""
    keep = table_module._rare_rows
    found: list[list[int]] = []

    def spy(header: list[str], data: list[list[str]], lo: int, hi: int) -> list[int]:
        found.append(rows := keep(header, data, lo, hi))
        return rows

    table_module._rare_rows = spy  # type: ignore[assignment]
    try:
        compress(text, ref="a#s1")
    finally:
        table_module._rare_rows = keep
    rows = [ln for ln, _ in table_lines([ln for ln in text.split("\n") if ln.strip()])]  # as compress_table
    return [rows[1 + i] for i in found[0]] if found else []


def _rendered(text: str, rule: bool) -> str:
    keep = table_module._rare_rows
    if not rule:
        table_module._rare_rows = lambda header, data, lo, hi: []  # type: ignore[assignment]
    try:
        return compress(text, ref="a#s1").text
    finally:
        table_module._rare_rows = keep


def main() -> dict[str, object]:
    count = load_counter(str(default_model_path()))
    tables: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = str(jobs_failing(Path(tmp), 2000, FAILED, CANCELLED))
        query = "SELECT * FROM jobs ORDER BY id"
        tables["jobs, tab-separated"] = _run(["sqlite3", "-header", "-separator", "\t", db, query])
        tables["jobs, -box"] = _run(["sqlite3", "-box", db, query])
    tables["ps -ef"] = _run(["ps", "-ef"])
    tables["pip list -v"] = _run([sys.executable, "-m", "pip", "list", "-v"])
    root = Path(numpy.__file__).parent
    files = sorted([*root.glob("_core/tests/data/*.csv"), *root.glob("random/tests/data/*.csv")])
    files += sorted(Path("/usr/share/distro-info").glob("*.csv"))
    tables.update({f"{p.parent.name}/{p.name}": p.read_text() for p in files})
    rows: dict[str, object] = {}
    for name, text in tables.items():
        rare = _rare_lines(text)
        before, after = _rendered(text, False), _rendered(text, True)
        rows[name] = {
            "kind": compress(text, ref="a#s1").kind,
            "rare_rows": len(rare),
            "shown_before": sum(r in before.split("\n") for r in rare),
            "shown_after": sum(r in after.split("\n") for r in rare),
            "tokens_before": count(before),
            "tokens_after": count(after),
        }
    changed = {
        k: v for k, v in rows.items() if isinstance(v, dict) and v["tokens_before"] != v["tokens_after"]
    }
    return {"tables": len(rows), "changed": len(changed), "rows": rows}


if __name__ == "__main__":
    report = main()
    Path(sys.argv[1]).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}))
    for name, row in report["rows"].items():  # type: ignore[union-attr]
        if row["rare_rows"]:
            print(f"{name:40} {row}")
