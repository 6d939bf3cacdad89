"""JUnit XML reports through one tree's `compress()` and deterministic digest.

The reports are real: pytest's `--junitxml` of generated suites run in a subprocess (both of its
formats, `xunit1` and `xunit2`, without captured output, pytest's default, which writes the report
on one line, and with it), small and large, each with a few failing
tests and an erroring one. Per report: its tokens; for `compress()` and for a digest at 1/8 of the
tokens (`summarizer.digest.Summarizer(None)`): the kind, the tokens, and the shares of the failing
test cases whose name (`name="..."`) and whose failure message are shown.

From a tree's root: PYTHONPATH=TREE .venv/bin/python -P bench/results/junit/stop50/junit.py OUT.json
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from summarizer.compress import compress
from summarizer.digest import Item, Summarizer
from summarizer.tokenizer import load_counter
from tests.fixtures.junit import pytest_report
from watcher.runtime.paths import default_model_path

SUITE = """
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_value(i):
    print("checking", i)
    data = {{"id": i, "values": list(range(i % 7))}}
    assert i not in {failing}, f"value {{i}} is reserved: {{data}}"

def test_needs_a_fixture(missing_fixture):
    pass
"""
SIZES = {
    "300 tests, 3 failing": (300, (17, 123, 250)),
    "3000 tests, 12 failing": (3000, tuple(range(7, 3000, 250))),
}


def _shares(text: str, failing: tuple[int, ...]) -> dict[str, float]:
    names = [f'name="test_value[{i}]"' for i in failing] + ['name="test_needs_a_fixture"']
    messages = [f"value {i} is reserved" for i in failing] + ["fixture 'missing_fixture' not found"]
    return {
        "names_shown": round(sum(n in text for n in names) / len(names), 3),
        "messages_shown": round(sum(m in text for m in messages) / len(messages), 3),
    }


async def main() -> dict[str, object]:
    count = load_counter(str(default_model_path()))
    rows: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, (n, failing) in SIZES.items():
            for family, logging in (("xunit1", "no"), ("xunit2", "no"), ("xunit1", "all"), ("xunit2", "all")):
                root = Path(tmp) / f"{n}-{family}-{logging}"
                root.mkdir()
                report = pytest_report(root, SUITE.format(n=n, failing=failing), family, logging)
                tokens = count(report)
                out = compress(report, ref="a#s1")
                digest = await Summarizer(None, count=count).digest(
                    [Item("s1", "tool_result", report, tokens)], "a", max(1, tokens // 8)
                )
                rows[f"{label}, {family}, junit_logging={logging}"] = {
                    "tokens": tokens,
                    "compress": {"kind": out.kind, "tokens": count(out.text), **_shares(out.text, failing)},
                    "digest_1_8": {"tokens": count(digest.text), **_shares(digest.text, failing)},
                }
    return {"reports": rows}


if __name__ == "__main__":
    report = asyncio.run(main())
    Path(sys.argv[1]).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))
