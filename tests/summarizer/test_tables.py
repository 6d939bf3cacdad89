"""A delimited table (a CSV file printed, a query's result) is shown as its shape: the header row,
a line per column, the first and last rows. Before, a CSV was taken for a directory listing
(`[listing: 1629 entries (0 dirs) in 1 directory]`, its rows run together on one line). Real data:
numpy's own CSV test sets (installed with numpy, a dependency), and a real SQLite query's result
printed as `sqlite3 -header -separator $'\\t'` prints it, and as the `sqlite3` shell prints it
between borders (`-table`, `-markdown`, `-box`)."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

from summarizer.compress import compress
from summarizer.detect import detect
from summarizer.digest import Item, Summarizer
from summarizer.frame import unquoted
from tests.fixtures.query import jobs_db, jobs_failing, jobs_query

REF = "a1#s1"
MARKER = re.compile(r"\[… (\d+) chars omitted; recall a1#s1\]")
DATA = Path(numpy.__file__).parent / "_core" / "tests" / "data"


def numpy_csv() -> str:
    return (DATA / "umath-validation-set-log2.csv").read_text()


def query_result(tmp_path: Path) -> str:
    return jobs_query(tmp_path, 400)


def _checked(text: str) -> str:
    out = compress(text, ref=REF)
    assert out.kind == "table" and compress(text, ref=REF) == out
    assert sum(int(n) for n in MARKER.findall(out.text)) == out.dropped_chars <= len(text)
    return out.text


def test_a_csv_file_shows_its_columns_rows_and_ends() -> None:
    text = numpy_csv()
    lines = text.rstrip("\n").split("\n")
    out = _checked(text)
    shown = out.split("\n")
    assert shown[0] == f"[table: {len(lines) - 1} rows, 4 columns, comma-separated]"
    assert shown[1] == "dtype,input,output,ulperrortol"
    assert "dtype: 2 values np.float32 np.float64" in shown
    assert "ulperrortol: 2 values 3 1" in shown
    assert lines[1] in shown and lines[-1] in shown  # the first and the last row, verbatim
    assert len(out) < len(text) / 20


def test_a_query_result_says_what_each_column_holds(tmp_path: Path) -> None:
    text = query_result(tmp_path)
    assert detect(text) == "table"
    shown = _checked(text).split("\n")
    assert shown[0] == "[table: 400 rows, 5 columns, tab-separated]"
    assert "status: 3 values done failed retrying" in shown
    assert "queue: 3 values q0 q1 q2" in shown
    assert "id: 400 values, from 0 to 399" in shown
    assert "wall_ms: 400 values, from 12.5 to 311.75" in shown


def _sqlite_shell(root: Path, *mode: str) -> str:
    """The `sqlite3` shell's own printing of the jobs query in `mode` (its borders and rules)."""
    return subprocess.run(
        ["sqlite3", *mode, str(jobs_db(root, 400)), "SELECT * FROM jobs ORDER BY id"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@pytest.mark.parametrize(
    ("mode", "delimiter"),
    [(("-table",), "pipe"), (("-markdown",), "pipe"), (("-box",), "box")],
    ids=["table", "markdown", "box"],
)
def test_a_table_between_borders_is_read_without_them(
    tmp_path: Path, mode: tuple[str, ...], delimiter: str
) -> None:
    """`+----+` and `|---|` rules are no rows, `| a | b |` borders no empty columns: before, each of
    these was a log of its first and last lines."""
    text = _sqlite_shell(tmp_path, *mode)
    assert detect(text) == "table"
    shown = _checked(text).split("\n")
    assert shown[0] == f"[table: 400 rows, 5 columns, {delimiter}-separated]"
    assert "status: 3 values done failed retrying" in shown
    assert "wall_ms: 400 values, from 12.5 to 311.75" in shown
    header = next(ln for ln in text.split("\n") if "queue" in ln)
    assert shown[1] == header and any(re.match(r"\W*399\b", ln) for ln in shown[-3:])


async def test_a_digest_of_bordered_tables_quotes_them(tmp_path: Path) -> None:
    """The frame check accepts what a bordered table's rendering writes (`box-separated`)."""
    items = []
    for i, mode in enumerate(("table", "markdown", "box"), 1):
        (tmp_path / mode).mkdir()
        items.append(Item(f"s{i}", "tool_result", _sqlite_shell(tmp_path / mode, f"-{mode}"), 12_000))
    digest = await Summarizer(None).digest(items, "a1", 3000)
    assert unquoted(digest.text, items) == []
    assert "[table: 400 rows, 5 columns, box-separated]" in digest.text


async def test_a_digest_of_tables_quotes_them(tmp_path: Path) -> None:
    items = [
        Item("s1", "tool_result", numpy_csv(), 30_000),
        Item("s2", "tool_result", query_result(tmp_path), 9_000),
    ]
    digest = await Summarizer(None).digest(items, "a1", 600)
    assert unquoted(digest.text, items) == []
    assert "dtype,input,output,ulperrortol" in digest.text


def _printed(argv: list[str]) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize(
    ("argv", "columns"),
    [
        ([sys.executable, "-m", "pip", "list"], ("Package", "Version")),
        ([sys.executable, "-m", "pip", "list", "-v"], ("Package", "Version", "Location", "Installer")),
    ],
    ids=["pip list", "pip list -v"],
)
def test_a_table_aligned_with_spaces_is_read_by_its_columns(
    argv: list[str], columns: tuple[str, ...]
) -> None:
    """`pip list` (its header over a `----` rule), with and without its locations: columns found
    where every line is blank. Before, it was a log of its first and last lines."""
    text = _printed(argv)
    assert detect(text) == "table"
    shown = _checked(text).split("\n")
    assert re.fullmatch(r"\[table: \d+ rows?, \d+ columns, space-separated\]", shown[0])
    assert all(any(ln.startswith(f"{c}: ") for ln in shown) for c in columns)


@pytest.mark.parametrize("mode", [("-header", "-separator", "\t"), ("-box",)], ids=["tab", "box"])
def test_the_rows_holding_a_rare_value_are_shown(tmp_path: Path, mode: tuple[str, ...]) -> None:
    """2 000 jobs of which 3 failed and 2 were cancelled: their rows are shown between the table's
    ends (before, the column line said `failed` existed, not which job)."""
    db = jobs_failing(tmp_path, 2000, (311, 1207, 1850), (64, 999))
    text = _printed(["sqlite3", *mode, str(db), "SELECT * FROM jobs ORDER BY id"])
    shown = _checked(text)
    assert "status: 3 values done cancelled failed" in shown.split("\n")
    for job in (64, 311, 999, 1207, 1850):
        assert re.search(rf"^\W*{job}\W.*(failed|cancelled)", shown, re.M), job
    assert not re.search(r"^\W*1000\W", shown, re.M)  # a job done, in the middle


async def test_a_value_wider_than_its_column_is_never_cut() -> None:
    """The columns are found in the first 200 lines; a later row whose value runs into the next
    column (as `lsof`'s do) is read by its words, not cut at the column's end into a value the
    table does not hold."""
    rows = [f"{f'worker-{i}':<12}{'running' if i % 3 else 'stopped':<10}{i * 7}" for i in range(300)]
    rows += [f"{f'worker-{i}':<12}restarting-after-crash {i}" for i in range(300, 320)]
    text = "\n".join([f"{'NAME':<12}{'STATE':<10}PID", *rows]) + "\n"
    assert detect(text) == "table"
    shown = _checked(text).split("\n")
    assert "STATE: 3 values stopped running restarting-after-crash" in shown
    items = [Item("s1", "tool_result", text, 4000)]
    for budget in (300, 1000):
        digest = await Summarizer(None).digest(items, "a1", budget)
        assert unquoted(digest.text, items) == []


def _python_log() -> str:
    """Real `logging` output: its `%(asctime)s` has a comma before the milliseconds."""
    stream = io.StringIO()
    log = logging.getLogger("tables-test")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    log.propagate = False
    try:
        for i in range(60):
            log.warning("worker %d, shard %d: retrying", i, i % 4)
    finally:
        log.removeHandler(handler)
    return stream.getvalue()


@pytest.mark.parametrize(
    "text",
    [
        _python_log(),
        "\n".join(
            f"Step {i}, as planned, edited module_{i}.py and ran the tests, all of them." for i in range(40)
        ),
        "Active Internet connections (servers and established)\n"
        + "Proto Recv-Q Send-Q Local Address           Foreign Address         State\n"
        + "".join(
            f"tcp        0      0 127.0.0.1:{6000 + i:<5}          0.0.0.0:*               LISTEN\n"
            for i in range(30)
        ),
        "\n".join(
            ["# Results", "", "What the run measured, per key:", "", "| name | value |", "|---|---|"]
            + [f"| key_{i} | {i} |" for i in range(40)]
        ),
    ],
    ids=[
        "python logging",
        "prose with commas",
        "a title over an aligned table",
        "markdown document with a table",
    ],
)
def test_logs_prose_and_markdown_are_not_tables(text: str) -> None:
    assert detect(text) != "table"


@pytest.mark.parametrize(
    "text",
    [
        "name,value\n" + "1,2\n" * 10 + "x" * 200_000 + ",y\n" + "3,4\n" * 10,  # over csv's field limit
        "name,value\n" + "".join(f'"unterminated {i},{i}\n' for i in range(400)),
        "name,value\n" + "a\x00b,1\n" * 400,
    ],
    ids=["huge field", "unterminated quotes", "NUL bytes"],
)
def test_a_table_csv_cannot_read_is_still_shown_and_loses_nothing(text: str) -> None:
    for room in (None, 600):
        out = compress(text, ref=REF, max_chars=room)
        assert 0 <= out.dropped_chars <= len(text) and MARKER.search(out.text)
        assert room is None or len(out.text) <= room
