"""A tool's output wrapped in JSON is compressed as what it is. Codex CLI records a shell call's
result as `{"output": ..., "metadata": {"exit_code": ..., "duration_seconds": ...}}`, sandboxes
answer `{"stdout": ..., "stderr": ..., "returncode": ...}`. Before, such a document was described as
`output: str "<its first 80 characters>…"` and the rest omitted, the exit code reduced to its key.
Real git and pytest runs, wrapped as those tools wrap them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from summarizer.compress import Renderer, compress
from summarizer.compress.jsondoc import decoded_payloads, text_payloads
from summarizer.digest import Item, Summarizer
from summarizer.frame import unquoted
from summarizer.names import ranked_names
from tests.fixtures.gitrepo import rescale, scratch_repo, write_module
from watcher.planning.identifiers import identifiers

REF = "a1#s1"
TEST = """
def helper_value(scale):
    return 3 * scale


def test_scaled_total():
    for scale in range(40):
        assert helper_value(scale) == 3 * scale + (scale == 17), f"scale {scale}"
"""


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, int]]:
    """(output, exit code) of a real `git diff` and a real failing pytest run."""
    root = tmp_path_factory.mktemp("wrapped")
    write_module(root, rescale(scratch_repo(root, 300), 50, 10, 3))
    (root / "test_scaled.py").write_text(TEST)
    runs = {
        "diff": ["git", "diff"],
        "pytest": [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--color=no", "test_scaled.py"],
    }
    out = {}
    for name, cmd in runs.items():
        done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=120, check=False)
        out[name] = (done.stdout, done.returncode)
    return out


def _codex(output: str, code: int) -> str:
    return json.dumps({"output": output, "metadata": {"exit_code": code, "duration_seconds": 1.5}})


@pytest.mark.parametrize("name", ["diff", "pytest"])
def test_a_wrapped_output_is_compressed_as_what_it_is(outputs: dict[str, tuple[str, int]], name: str) -> None:
    raw, code = outputs[name]
    wrapped = _codex(raw, code)
    assert decoded_payloads(wrapped) == [raw]
    got = compress(wrapped, ref=REF).text.split("\n")
    assert got[0] == "[json: object with 2 keys]" and got[1] == f"output: str, {raw.count(chr(10)) + 1} lines"
    bare = compress(raw, ref=REF).text.split("\n")
    assert got[2 : 2 + len(bare)] == bare  # the payload's own rendering, line for line
    assert f'metadata: {{"exit_code":{code},"duration_seconds":1.5}}' in got


def test_stdout_and_stderr_both_and_the_return_code(outputs: dict[str, tuple[str, int]]) -> None:
    raw, code = outputs["pytest"]
    doc = json.dumps({"stdout": raw, "stderr": raw.replace("FAILED", "ERROR"), "returncode": code})
    text = Renderer(doc, ref=REF).render().text
    assert "stdout: str" in text and "stderr: str" in text and f"returncode: {code}" in text
    assert "FAILED test_scaled.py::test_scaled_total" in text


def test_a_document_of_fields_is_no_payload() -> None:
    many = {f"field_{i}": "line one\nline two\n" * 30 for i in range(12)} | {"items": list(range(2000))}
    assert text_payloads(many, len(json.dumps(many))) == []
    assert decoded_payloads(json.dumps([{"a": "x\n" * 900}])) == []  # an array is data
    assert decoded_payloads("not json {") == [] and decoded_payloads('{"broken": ') == []


async def test_a_digest_quotes_the_wrapped_output_decoded(outputs: dict[str, tuple[str, int]]) -> None:
    raw, code = outputs["pytest"]
    diff, _ = outputs["diff"]
    summarizer = Summarizer(None)
    items = [
        Item("s1", "tool_call", "git diff", 4),
        Item("s2", "tool_result", _codex(diff, 0), summarizer.count(_codex(diff, 0))),
        Item("s3", "tool_call", "pytest test_scaled.py", 6),
        Item("s4", "tool_result", _codex(raw, code), summarizer.count(_codex(raw, code))),
    ]
    digest = await summarizer.digest(items, "a1#d1", 500)
    assert unquoted(digest.text, items) == []
    assert "AssertionError: scale 17" in digest.text or "scale 17" in digest.text
    shown = next(ln for ln in digest.text.split("\n") if ln.startswith("Names")).split(": ", 1)[1].split()
    plain = [Item("s2", "tool_result", diff, 1), Item("s4", "tool_result", raw, 1)]
    assert set(shown) <= set(ranked_names(plain))  # no `ntest_scaled` from an escaped "\ntest_scaled"


def test_the_planner_reads_a_wrapped_output_s_identifiers_decoded(
    outputs: dict[str, tuple[str, int]],
) -> None:
    raw, code = outputs["pytest"]
    assert identifiers(_codex(raw, code)) == identifiers(raw)  # not `ntest_scaled`, nor the JSON's keys
    assert "test_scaled_total" in identifiers(raw)
