"""Tables (CSV, TSV, `sqlite3`, `psql` and `mysql` results, Markdown tables, and tables aligned
with spaces: `pip list`, `ps -ef`, `lsof`): their shape, then their rows' ends.

A table printed whole (`cat data.csv`, a query's result) is rows of one shape; what an agent needs
of an old one is its columns, how many rows it had, what each column holds, and a few rows to see
the format. `compress_table` shows the header row, one line per column (its distinct values when
few, quoted; else the range of a numeric column), the first and last rows verbatim and the rows
that hold a value few rows hold in a column of few values (a failed job among thousands done), and
omits the rest. The delimiter is the one that splits the sampled lines as a table under a header row
(summarizer.detect.table_delimiter); rule lines (`+----+`, `|---|`) are left out, and a row between
borders (`| a | b |`) is read without them (summarizer.detect.table_lines). A table aligned with
spaces is cut at its columns' positions (summarizer.detect.aligned_columns).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

from summarizer.compress.out import Out, plural
from summarizer.detect import aligned_columns, split_rows, table_delimiter, table_lines

_HEAD_ROWS, _TAIL_ROWS = 8, 4
_COLUMNS_MAX = 24  # more columns than this: the first 24 are described
_FEW = 6  # a column with at most this many distinct values lists them
_VALUE_MAX = 40  # longer values are not listed
_READ_MAX = 200_000  # rows read for the column lines (bounded work); all rows are counted
_RARE_ROWS = 6  # rows shown besides the ends because they hold a rare value (_rare_rows) ...
_RARE_MAX = 3  # ... one at most this many rows hold


def _number(value: str) -> float | None:
    try:
        n = float(value)
    except ValueError:
        return None
    return n if math.isfinite(n) else None


def _column(name: str, values: list[str]) -> str:
    """A column's line: its distinct values when few, else their count, and a numeric column's
    smallest and largest value as written."""
    distinct: dict[str, None] = dict.fromkeys(v.strip() for v in values)
    label = f"{name}: {plural(len(distinct), 'value')}"
    if len(distinct) <= _FEW and all(len(v) <= _VALUE_MAX for v in distinct):
        return f"{label} " + " ".join(v or '""' for v in distinct)
    numbers = [(n, v) for v in distinct if (n := _number(v)) is not None]
    if numbers and len(numbers) >= 0.9 * len(distinct):
        return f"{label}, from {min(numbers)[1]} to {max(numbers)[1]}"
    return label


def _rare_rows(header: list[str], data: list[list[str]], lo: int, hi: int) -> list[int]:
    """Indices into `data` from `lo` to `hi` (the rows the table's ends do not show), in order, of
    the first _RARE_ROWS rows holding a value that few rows hold (at most _RARE_MAX, and 1 % of
    them) in a column of at most _FEW values: the failed job among thousands done, the one process
    of another user."""
    limit = min(_RARE_MAX, max(1, len(data) // 100))
    chosen: set[int] = set()
    for k in range(min(len(header), _COLUMNS_MAX)):
        counts = Counter(r[k].strip() for r in data if k < len(r))
        if not 2 <= len(counts) <= _FEW:
            continue
        rare = {v for v, n in counts.items() if n <= limit}
        chosen.update(
            i for i in range(lo, min(hi, len(data))) if k < len(data[i]) and data[i][k].strip() in rare
        )
    return sorted(chosen)[:_RARE_ROWS]


def _aligned_row(line: str, spans: list[tuple[int, int]]) -> list[str]:
    """A row of a table aligned with spaces, cut at its columns' positions (the last: to its end).
    A row with text between two columns (a value wider than its column in the lines the columns
    were found in) is not cut there, into a value the table does not hold: it is its words when
    they are as many as the columns, else no cells."""
    if line[: spans[0][0]].strip() or any(line[b:a].strip() for (_, b), (a, _) in itertools.pairwise(spans)):
        words = line.split()
        return words if len(words) == len(spans) else []
    cells = [line[a:b] for a, b in spans[:-1]] + [line[spans[-1][0] :]]
    return [c.strip() for c in cells]


def compress_table(body: str, ref: str) -> tuple[str, str, int]:
    raw = [ln for ln in body.split("\n") if ln.strip()]
    read = table_lines(raw)  # (rules left out)
    lines = [ln for ln, _ in read]
    delim = table_delimiter(raw)
    spans = None if delim else aligned_columns(raw)
    if spans:
        rows = [_aligned_row(ln, spans) for ln in lines[: _READ_MAX + 1]]
    else:
        rows = split_rows([text for _, text in read[: _READ_MAX + 1]], delim or ",")
    if not rows or not rows[0]:
        return "table: no rows", body, 0
    width = len(rows[0])
    header, data = rows[0], rows[1:]
    out = Out(ref)
    out.keep(lines[0])
    shown = len(lines[0]) + 1
    for k, name in enumerate(header[:_COLUMNS_MAX]):
        out.note(_column(name.strip() or f"column {k + 1}", [r[k] for r in data if k < len(r)]))
    if len(header) > _COLUMNS_MAX:
        out.note(f"… {len(header) - _COLUMNS_MAX} more columns")
    rest = lines[1:]
    head, tail = rest[:_HEAD_ROWS], rest[max(_HEAD_ROWS, len(rest) - _TAIL_ROWS) :]
    for ln in head:
        out.keep(ln)
        shown += len(ln) + 1
    pos, end = len(head), len(rest) - len(tail)
    rare = _rare_rows(header, data, pos, end) if len(rows) == min(len(lines), _READ_MAX + 1) else []
    for i in rare:  # (data[i] is the row of rest[i])
        out.omit(sum(len(ln) + 1 for ln in rest[pos:i]))
        out.keep(rest[i])
        shown += len(rest[i]) + 1
        pos = i + 1
    out.omit(sum(len(ln) + 1 for ln in rest[pos:end]))
    for ln in tail:
        out.keep(ln)
        shown += len(ln) + 1
    out.omit(max(0, len(body) - shown - out.dropped))  # blank lines, and what clipping cut
    name = (
        "space"
        if spans
        else {",": "comma", "\t": "tab", "|": "pipe", ";": "semicolon", "│": "box"}[delim or ","]
    )
    summary = f"table: {plural(len(rest), 'row')}, {plural(width, 'column')}, {name}-separated"
    return summary, out.render(), out.dropped
