"""Compressors on real tool outputs from /work/shared/trajectories."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from summarizer.compressors import SMALL_INPUT, Compressed, compress, head_tail, omission
from summarizer.detect import split_envelope
from tests.fixtures.trajectories import TRAJ, mini, openhands, submission
from tests.fixtures.trajectories import load as _load

REF = "t1#42"
MARKER = re.compile(r"\[… (\d+) chars omitted; recall t1#42\]")


def all_tool_outputs() -> Iterator[str]:
    """Every tool output of every trajectory (mini-swe-agent, OpenHands, SWE-agent)."""
    for path in sorted((TRAJ / "mini-swe-agent").glob("*.traj.json")):
        messages = _load(f"mini-swe-agent/{path.name}")["messages"]
        yield from (m["content"] for m in messages[2:] if m["role"] == "user")
    for rel in ("openhands/output.jsonl", "openhands-nunu0404/output.jsonl"):
        for task in _load(rel):
            yield from (e["content"] for e in task["history"] if "observation" in e)
    history = _load("swe-agent/pydicom__pydicom-1458.traj")["history"]
    yield from (m["content"] for m in history[3:] if m["role"] == "user")


def squeeze(text: str, **kwargs: Any) -> Compressed:
    """compress, checked for the properties every compression must have."""
    result = compress(text, ref=REF, **kwargs)
    assert compress(text, ref=REF, **kwargs) == result  # deterministic
    assert 0 <= result.dropped_chars <= len(text)
    if result.text != text:
        assert MARKER.search(result.text), "whatever is dropped is announced with the recall ref"
    return result


NUNU = "openhands-nunu0404/output.jsonl"
OH = "openhands/output.jsonl"


# --------------------------------------------------------------------------------------------- marker


def test_omission_marker_format() -> None:
    assert omission(1234, "sec-7") == "[… 1234 chars omitted; recall sec-7]"


# ------------------------------------------------------------------------------------------ head_tail


def test_head_tail_returns_text_that_fits_unchanged() -> None:
    text = mini("django__django-15629", 97)
    assert head_tail(text, len(text), REF) == text
    assert head_tail(text, len(text) + 100, REF) == text


@pytest.mark.parametrize("max_chars", [60, 61, 80, 200, 1000, 5000])
def test_head_tail_bounds_and_line_boundaries(max_chars: int) -> None:
    text = mini("pytest-dev__pytest-6197", 109)  # 8.6k chars of pytest output
    out = head_tail(text, max_chars, REF)
    assert len(out) <= max_chars
    marker = MARKER.search(out)
    assert marker is not None
    head, tail = out.split("\n" + marker[0] + "\n")
    assert text.startswith(head) and text.endswith(tail)
    assert int(marker[1]) == len(text) - len(head) - len(tail)
    if max_chars >= 1000:  # room for whole lines: cuts fall on line boundaries
        assert text[len(head)] == "\n"
        assert text[len(text) - len(tail) - 1] == "\n"


def test_head_tail_of_a_rendering_never_shows_a_piece_of_its_markers() -> None:
    """A compressed rendering cut again to a smaller room (a digest's section line) keeps each of its
    own omission markers whole or drops it whole: never a fragment such as `recall t1#42]` alone."""
    rendering = squeeze(mini("pytest-dev__pytest-6197", 109)).text
    assert len(MARKER.findall(rendering)) >= 2
    whole = re.compile(rf"^\s*{MARKER.pattern}\s*$")
    starts = [0] + [i + 1 for i, c in enumerate(rendering) if c == "\n"]
    cut = 0
    for k in starts:  # each end of the rendering comes near a marker in some of these texts
        for text in (rendering[k:], rendering[: max(k - 1, 0)]):
            for max_chars in range(60, min(len(text), 240), 3):
                out = head_tail(text, max_chars, REF)
                assert len(out) <= max_chars
                lines = out.split("\n")
                pieces = [ln for ln in lines if ("recall " in ln or "omitted" in ln) and not whole.match(ln)]
                assert not pieces, (k, max_chars, pieces)
                cut += len(lines) > 1
    assert cut > 100


def test_head_tail_smaller_than_marker_is_just_the_marker() -> None:
    text = mini("pytest-dev__pytest-6197", 109)
    assert head_tail(text, 10, REF) == omission(len(text), REF)


def test_head_tail_on_a_single_huge_line() -> None:
    line = openhands(NUNU, 0, 24).splitlines()[9839]  # an 11k-char JSON line printed by a test
    assert len(line) > 10_000
    out = head_tail(line, 500, REF)
    assert len(out) <= 500 and MARKER.search(out)
    assert line.startswith(out.split("\n")[0])


# ------------------------------------------------------------------------------------------ test runs


def test_pytest_failures_keep_failure_lines_and_summary() -> None:
    text = mini("pytest-dev__pytest-6197", 109)
    result = squeeze(text)
    assert result.kind == "test"
    assert result.text.startswith("[test run: 2 failed in 0.24s]\n<returncode>1</returncode>\n<output>\n")
    out = result.text
    for line in (
        "============================== 2 failed in 0.24s ===============================",
        "FAILED testing/test_collection.py::test_collect_sub_with_symlinks[True] - Fai...",
        "FAILED testing/test_collection.py::test_collect_sub_with_symlinks[False] - Fa...",
        "_____________________ test_collect_sub_with_symlinks[True] _____________________",
        "E       Failed: nomatch: 'sub/test_file.py::test_file PASSED*'",
        ">       result.stdout.fnmatch_lines(",
        "/testbed/testing/test_collection.py:1236: Failed",
        "E   UnboundLocalError: local variable 'm' referenced before assignment",
    ):
        assert line in out.splitlines(), line
    assert "    def test_collect_sub_with_symlinks(use_pkg, testdir):" not in out  # test source dropped
    assert len(out) < 0.7 * len(text)


def test_pytest_drops_passing_dots_and_warnings_keeps_failure() -> None:
    text = mini("sphinx-doc__sphinx-9258", 195)  # 45 tests, one failure, 192 warnings
    result = squeeze(text)
    out = result.text
    assert out.startswith("[test run: 1 failed, 44 passed, 192 warnings in 1.67s; harness already elided")
    assert "FAILED tests/test_domain_py.py::test_info_field_list - AssertionError: The no..." in out
    assert "tests/test_domain_py.py ...................................F.........    [100%]" in out
    assert "DeprecationWarning: 'soft_unicode' has been renamed" not in out
    assert len(out) < 0.2 * len(text)


def test_pytest_all_passed() -> None:
    text = mini("pytest-dev__pytest-6197", 91)
    result = squeeze(text)
    assert result.kind == "test"
    summary = [ln for ln in text.splitlines() if re.fullmatch(r"=+ .*(passed|failed).* =+", ln)][-1]
    assert summary in result.text


def test_unittest_errors_keep_first_and_last_frames_and_exceptions() -> None:
    text = mini("psf__requests-1142", 63)
    out = squeeze(text).text
    assert out.startswith("[test run: Ran 26 tests in 0.032s; FAILED (errors=21)")
    lines = out.splitlines()
    for line in (
        "Ran 26 tests in 0.032s",
        "FAILED (errors=21)",
        "ERROR: test_BASICAUTH_TUPLE_HTTP_200_OK_GET (__main__.RequestsTestCase)",
        '  File "/testbed/test_requests.py", line 136, in test_BASICAUTH_TUPLE_HTTP_200_OK_GET',
        '  File "/testbed/requests/models.py", line 140, in register_hook',
        "AttributeError: module 'collections' has no attribute 'Callable'",
        "TypeError: HTTPConnection.__init__() got an unexpected keyword argument 'strict'",
    ):
        assert line in lines, line
    assert '  File "/testbed/requests/api.py", line 55, in get' not in lines[:12]  # middle frames dropped
    every_error = [ln for ln in text.splitlines() if ln.startswith("ERROR: test_")]
    assert all(ln in lines for ln in every_error)


def test_django_runner_ok_drops_dots() -> None:
    text = mini("django__django-15629", 97)
    out = squeeze(text).text
    assert out.startswith("[test run: Ran 609 tests in 3.566s; OK (skipped=37)]")
    assert "Ran 609 tests in 3.566s" in out and "OK (skipped=37)" in out.splitlines()
    assert "....s...." not in out


def test_sympy_runner_keeps_test_header_and_exception() -> None:
    text = mini("sympy__sympy-13091", 87)
    out = squeeze(text).text
    assert "[test run: tests finished: 90 passed, 2 expected to fail, 2 exceptions, in 4.17 seconds]" in out
    assert "_______________ sympy/core/tests/test_expr.py:test_action_verbs ________________" in out
    assert '  File "/testbed/sympy/core/tests/test_expr.py", line 1222, in test_action_verbs' in out


def test_maven_915k_run_compresses_to_a_few_kilobytes() -> None:
    text = openhands(NUNU, 0, 24)
    out = squeeze(text).text
    assert len(text) > 900_000
    assert len(out) < 5_000
    assert out.startswith("[test run: Tests run: ")
    assert "com.alibaba.fastjson2.JSONException: not support type : OBJECT_END -91, offset 55/55" in out
    assert "com.alibaba.fastjson.JSONException: illegal number, offset 21, char ]" in out


# ----------------------------------------------------------------------------------------------- logs


def test_maven_build_log_keeps_errors_collapses_repeats() -> None:
    text = openhands(NUNU, 0, 20)
    result = squeeze(text)
    assert result.kind == "log"
    out = result.text
    assert out.startswith("[log: ")
    assert "Apache Maven 3.9.0 (9b58d2bad23a66be161c4664ef21ce219c2c8584)" in out  # head
    assert "[INFO] BUILD FAILURE" in out
    assert (
        "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-checkstyle-plugin:3.4.0:check "
        "(checkstyle) on project fastjson2: You have 28 Checkstyle violations. -> [Help 1]"
    ) in out
    collapsed = [ln for ln in out.splitlines() if "(×28)" in ln]  # 28 checkstyle errors differing in numbers
    assert len(collapsed) == 1 and collapsed[0].startswith(
        "[ERROR] src/main/java/com/alibaba/fastjson2/JSON.java"
    )
    assert MARKER.search(collapsed[0])
    assert "[ERROR]   mvn <args> -rf :fastjson2" in out  # tail
    assert len(out) < 0.5 * len(text)


def test_lint_log_collapses_lines_differing_in_numbers() -> None:
    text = mini("pylint-dev__pylint-6528", 99)
    result = squeeze(text)
    assert result.kind == "log"
    assert any("(×2)" in ln for ln in result.text.splitlines())
    assert "FAIL: .a/foo.py was not ignored" in result.text


# ----------------------------------------------------------------------------------------------- json


def test_json_array_schema_count_first_last_outliers() -> None:
    history = _load(OH)[0]["history"]
    text = json.dumps(history, indent=2)
    result = squeeze(text)
    assert result.kind == "json"
    out = result.text
    assert out.startswith(f"[json: array of {len(history)} items]\n")
    assert f"count: {len(history)}" in out
    schema = next(ln for ln in out.splitlines() if ln.startswith("schema: {"))
    for key in ("id: int", "timestamp: str", "source: str", "observation: str", "args: object"):
        assert key in schema
    assert 'first: {"id":0,"timestamp":"2025-04-30T16:32:54.707474"' in out
    assert f'last: {{"id":{history[-1]["id"]},' in out
    assert re.search(r"outliers: \d+ items with other keys", out)
    assert len(out) < 0.05 * len(text)


def test_json_object() -> None:
    task = _load(OH)[1]
    result = squeeze(json.dumps(task))
    assert result.text.startswith(f"[json: object with {len(task)} keys]")
    assert re.search(r"^history: array\[\d+\] of object\{id, timestamp, source, message", result.text, re.M)
    assert "instance_id: str " in result.text


def test_json_lines() -> None:
    lines = [ln for ln in openhands(NUNU, 0, 24).splitlines() if ln.startswith('{"availableBeginTime"')]
    result = squeeze("\n".join(lines))
    assert result.text.startswith(f"[json: array of {len(lines)} items (JSON lines)]")
    assert "schema: {availableBeginTime: str, availableEndTime: str}" in result.text


# ----------------------------------------------------------------------------------------------- grep


def test_grep_grouped_by_file_with_counts() -> None:
    text = mini("pytest-dev__pytest-6197", 13)
    result = squeeze(text)
    assert result.kind == "grep"
    out = result.text
    hits = [ln for ln in text.splitlines() if ln.startswith("src/_pytest/python.py:")]
    assert out.startswith("[grep: ")
    assert f"src/_pytest/python.py ({len(hits)} matches)" in out
    assert '  if path.basename == "__init__.py":' in out  # a first hit, path factored out
    assert "binary file matches (11): src/_pytest/mark/__pycache__/__init__.cpython-39.pyc" in out


def test_grep_many_files_lists_the_rest_compactly() -> None:
    text = mini("pylint-dev__pylint-6528", 11)  # pylint messages from 151 files, command timed out
    result = squeeze(text)
    out = result.text
    assert out.startswith("[grep: 288 matches in 151 files; command timed out]")
    assert "121 more files (" in out
    assert len(out) < 0.2 * len(text)


# ---------------------------------------------------------------------------------------------- diffs


def test_diff_868k_keeps_headers_hunks_and_changes() -> None:
    text = submission("psf__requests-1142")  # 65 files added under build/ plus the real fix
    result = squeeze(text)
    assert result.kind == "diff"
    out = result.text
    assert out.startswith("[diff: 66 files, +16179 -1, 66 hunks; context lines dropped]")
    lines = out.splitlines()
    assert "diff --git a/requests/models.py b/requests/models.py" in lines
    assert "@@ -386,13 +386,14 @@ class PreparedRequest(RequestEncodingMixin, RequestHooksMixin):" in lines
    assert "-        self.headers['Content-Length'] = '0'" in lines
    assert "+        elif self.method not in ('GET', 'HEAD'):" in lines
    assert "diff --git a/build/lib/requests/api.py b/build/lib/requests/api.py" in lines
    assert len(out) < 0.03 * len(text)


def test_diff_keeps_every_hunk_header_and_changed_line_drops_context() -> None:
    text = submission("sympy__sympy-13091")
    out = squeeze(text, kind="diff").text
    lines = set(out.splitlines())
    hunks = [ln for ln in text.splitlines() if ln.startswith("@@ ")]
    assert hunks and all(h in lines for h in hunks)
    in_modified = text[text.index("diff --git a/sympy/core/basic.py") :]
    changed = [ln for ln in in_modified.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert all(ln in lines for ln in changed)
    assert '         """Helper for .has()"""' not in lines  # a context line


# ----------------------------------------------------------------------------------------------- files


def test_java_file_read_outline() -> None:
    text = openhands(NUNU, 0, 4)  # OpenHands `cat -n` of JSON.java
    result = squeeze(text)
    assert result.kind == "file"
    out = result.text
    assert out.startswith("[file read: lines 1-393, ")
    lines = out.splitlines()
    assert lines[1].startswith("Here's the result of running `cat -n` on /home/fastjson2/core/src/main/")
    assert "    36\tpublic interface JSON {" in lines
    assert "   337\t    static JSONObject parseObject(String text) {" in lines
    assert any(ln.startswith("imports (31, lines 1-34): ") for ln in lines)
    assert len(out) < 0.15 * len(text)


def test_a_read_numbered_with_arrows_is_outlined_like_cat_n() -> None:
    """Claude Code's Read tool numbers lines as `cat -n` does, with an arrow for the tab: the same
    outline, each of its lines verbatim as the read showed it (it was taken for a log before)."""
    text = openhands(NUNU, 0, 4)  # OpenHands `cat -n` of JSON.java
    arrows = re.sub(r"^( *\d+)\t", "\\1→", text, flags=re.M)
    assert arrows.count("→") > 300
    result = squeeze(arrows)
    assert result.kind == "file"
    assert result.text == squeeze(text).text.replace("\t", "→")
    assert "    36→public interface JSON {" in result.text.splitlines()
    shown = [ln for ln in result.text.splitlines() if re.match(r" *\d+→", ln)]
    assert len(shown) > 10 and all(ln in arrows.splitlines() for ln in shown)


def test_c_file_read_outline() -> None:
    out = squeeze(openhands(OH, 2, 13)).text  # match.c
    assert "   282\tstatic ast_t* make_pattern_type(pass_opt_t* opt, ast_t* pattern)" in out
    assert "   152\tbool expr_match(pass_opt_t* opt, ast_t* ast)" in out
    assert "imports (15, lines 1-15): match.h, literal.h" in out
    assert out.rstrip().endswith("</NOTE>")  # the harness's clipping note is kept


def test_python_file_read_outline_unnumbered() -> None:
    text = mini("django__django-15629", 15)  # cat django/db/backends/mysql/schema.py
    out = squeeze(text).text
    assert out.startswith("[file read: lines 1-175 of output (numbered here), ")
    assert "     5\tclass DatabaseSchemaEditor(BaseDatabaseSchemaEditor):" in out
    assert "   103\t    def add_field(self, model, field):" in out
    assert "            return super().add_field(model, field)" not in out
    assert out.endswith("</output>")


def test_numbered_slice_keeps_real_line_numbers() -> None:
    text = mini("sympy__sympy-13091", 19)  # nl -ba sympy/core/expr.py | sed -n '240,320p'
    out = squeeze(text).text
    assert out.startswith("[file read: lines 240-320, ")
    defs = [ln for ln in text.splitlines() if re.match(r"\s*\d+\t\s*def ", ln)]
    assert defs and all(f"{int(d.split(chr(9))[0]):>6}\t{d.split(chr(9), 1)[1]}" in out for d in defs)


# ------------------------------------------------------------------------------------------- listings


def test_ls_la_names_only_directories_first() -> None:
    text = mini("django__django-15629", 3)
    result = squeeze(text)
    assert result.kind == "listing"
    out = result.text
    assert out.startswith("[listing: 31 entries (10 dirs) in 1 directory]")
    assert "drwxrwxrwx" not in out and "Oct 24" not in out
    dirs = out.index("  dirs (10): .git/ .github/")
    files = out.index("  files (21): .editorconfig")
    assert dirs < files
    assert "tests/" in out and "setup.py" in out


def test_ls_recursive_groups_by_directory() -> None:
    text = mini("pytest-dev__pytest-6197", 3)
    out = squeeze(text).text
    assert ".:\n  dirs (7): bench/ changelog/ doc/ extra/ scripts/ src/ testing/" in out
    assert "./doc/en/announce:\n  entries (116): index.rst release-2.0.0.rst" in out
    assert len(out) < 0.7 * len(text)


# ---------------------------------------------------------------------------------- prose and general


def test_prose_is_unchanged() -> None:
    text = mini("pylint-dev__pylint-6528", 2)  # an assistant message
    result = squeeze(text)
    assert result == Compressed(text, "prose", 0)


def test_small_outputs_are_unchanged() -> None:
    text = mini("sympy__sympy-13091", 93)  # a 316-char grep
    assert len(text) <= SMALL_INPUT
    result = squeeze(text)
    assert result.text == text and result.dropped_chars == 0 and result.kind == "grep"


def test_explicit_kind_overrides_detection() -> None:
    text = mini("pytest-dev__pytest-6197", 13)
    assert squeeze(text, kind="log").kind == "log"
    assert squeeze(text, kind="log").text.startswith("[log: ")


@pytest.mark.parametrize("max_chars", [300, 1000, 4000])
def test_max_chars_bounds_every_result(max_chars: int) -> None:
    for text in (openhands(NUNU, 0, 24), submission("psf__requests-1142"), mini("django__django-15629", 2)):
        result = squeeze(text, max_chars=max_chars)
        assert len(result.text) <= max_chars


def test_every_real_tool_output_compresses_consistently() -> None:
    """All ~700 tool outputs: never longer, markers account exactly for what was dropped."""
    changed = 0
    for text in all_tool_outputs():
        result = squeeze(text)
        assert len(result.text) <= len(text)
        if result.text == text:
            assert result.dropped_chars == 0
            continue
        changed += 1
        announced = sum(int(n) for n in MARKER.findall(result.text))
        assert announced + split_envelope(text).dropped == result.dropped_chars
        assert result.text.startswith("[")
    assert changed > 150


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,  # deeper than json can parse
        "9" * 5000 + ":x\n" + "9" * 5000 + ":y\n" * 50,  # numbers too long for int()
        "@@ -1," + "9" * 5000 + " +1,2 @@\n+a\n" * 100,
        " " * 5000 + "\t" * 5000,
        "\n" * 100_000,
    ],
    ids=["deep-json", "huge-line-numbers", "huge-hunk-count", "whitespace", "newlines"],
)
@pytest.mark.parametrize("kind", [None, "test", "log", "json", "grep", "diff", "file", "listing"])
def test_degenerate_inputs_do_not_break_any_compressor(text: str, kind: Any) -> None:
    result = squeeze(text, kind=kind, max_chars=2000)
    assert len(result.text) <= 2000
