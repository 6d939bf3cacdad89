"""Real delimited tables through one tree's `compress()`: numpy's CSV test sets (every `*.csv` under
the installed numpy's `_core/tests/data` and `random/tests/data`), Debian's distro-info tables
(`/usr/share/distro-info/*.csv`, when present), and a real SQLite query's result printed with a
header, tab-separated (`sqlite3 -header -separator $'\\t'`'s shape).

Per table: its kind, tokens before and after, and what an agent needs of its shape, judged on the
rendering's lines: the header row shown whole, the first and the last data row shown whole, and
how many of the columns' names appear. Aggregates: counts over the tables.

From a tree's root: PYTHONPATH=TREE .venv/bin/python -P bench/results/tables/stop50/tables.py OUT.json
"""

from __future__ import annotations

import csv
import json
import sys
import tempfile
from pathlib import Path

import numpy

from summarizer.compress import compress
from summarizer.tokenizer import load_counter
from tests.fixtures.query import jobs_query
from watcher.runtime.paths import default_model_path


def _query() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        return jobs_query(Path(tmp), 2000)


def main() -> dict[str, object]:
    count = load_counter(str(default_model_path()))
    root = Path(numpy.__file__).parent
    files = sorted([*root.glob("_core/tests/data/*.csv"), *root.glob("random/tests/data/*.csv")])
    files += sorted(Path("/usr/share/distro-info").glob("*.csv"))
    tables = {f"{p.parent.name}/{p.name}": p.read_text() for p in files}
    tables["sqlite query (tsv)"] = _query()
    rows: dict[str, object] = {}
    for name, text in tables.items():
        lines = [ln for ln in text.split("\n") if ln.strip()]
        out = compress(text, ref="a#s1")
        shown = set(out.text.split("\n"))
        header = next(csv.reader([lines[0]], delimiter="\t" if "\t" in lines[0] else ","))
        rows[name] = {
            "kind": out.kind,
            "tokens": count(text),
            "tokens_after": count(out.text),
            "header_row": lines[0] in shown,
            "first_row": lines[1] in shown,
            "last_row": lines[-1] in shown,
            "column_names": round(sum(h in out.text for h in header) / len(header), 3),
        }
    n = len(rows)
    summary = {
        key: sum(1 for r in rows.values() if isinstance(r, dict) and r[key])
        for key in ("header_row", "first_row", "last_row")
    }
    return {"tables": n, **{f"{k}_shown": v for k, v in summary.items()}, "rows": rows}


if __name__ == "__main__":
    report = main()
    Path(sys.argv[1]).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}))
