"""Which lines of a build or test log carry a failure, by the structure of the line, not its words.

Works on clean lines (summarizer.compress.clean). A line is:

* a *failure* line when its structure says so: `##[error]`, `error[E0308]:`, `path:12:3: error`,
  `FAILED test`, `--- FAIL:`, `● suite › test`, `npm ERR!` (npm 10's `npm error`), `make: ***`,
  `BUILD FAILED`, `Caused by:`, `SomeError: message`, `panicked at`, `exit code 2`, `3 failed`, a TAP
  `not ok 3 - name` (node --test, prove, bats), a linker's `undefined reference to 'f'`, `CMake
  Error at CMakeLists.txt:3`, a linter's `x.py:1:8: F401 ...` or `  3:7  error  ...` (flake8, ruff,
  pylint, eslint), Go's `./x.go:5:2: undefined: f`, Kotlin's `e: App.kt: ...`, a formatter's `would
  reformat x.py`, `2 files would be reformatted` (black, ruff format); and the verdicts of many
  other tools: prove's `Result: FAIL`, a C program's `Assertion `x' failed.` and `Aborted`, the
  sanitizers' and valgrind's reports, git's `CONFLICT (content):`, Bazel's `FAILED in 0.5s`, R's
  `Execution halted`, a Go test's `x_test.go:12: got 1`, coverage thresholds not reached, ...;
* a *pass* line when it reports a passing test (`PASSED`, `ok`, `✓`, `[  OK  ]`): never a failure, even
  when the test's name says "error";
* a *mention* line when an error word merely appears in it ("error-handler", "0 errors", "cannot").
  Warnings are neither: a failing log is full of them and they are rarely why it failed.
* *advice* (neither) when a runner's error line only says how to learn more: Maven's `[ERROR] Re-run
  Maven using the -X switch`, `[ERROR] [Help 1] https://...`, an `[ERROR]` with nothing after it,
  npm's `A complete log of this run can be found in`. Maven ends every failed build with such lines;
  shown as failures, they took the room of the errors they follow. A CI runner's housekeeping is
  treated the same way (`HOUSEKEEPING`: GitHub Actions' `##[endgroup]`, `Post job cleanup.`,
  `Cleaning up orphan processes`, a step's `shell: /usr/bin/bash -e {0}`; yarn's `info Visit
  https://yarnpkg.com/... for documentation about this command.`; what post-job steps print after
  `Post job cleanup.`; GitLab's `section_end:...` and `Cleaning up project directory and file based
  variables`): it follows every step, so it was the context line of every error
  annotation and the "last line" of every log, in room a failing script's `exit 1` needed.

Scanning runs over the whole text at once (one regex pass per class, line numbers by bisection), so
a megabyte of log costs tens of milliseconds.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from summarizer.compress.clean import stamp_free, uncoloured
from summarizer.textscan import line_starts, lines_with

# failures the start of a line says (tried with .match)
_FAILURE_START: Final = re.compile(
    r"[ \t]*(?:##\[error\]|::error\b|\[(?:ERROR|FATAL|FAIL(?:ED|URE)?|error)\]"  # (sbt's `[error] `)
    r"|(?:ERROR|FATAL|FAIL(?:ED|URE)?)\b"
    r"|E {2,}\S|--- FAIL\b|={1,3} FAIL\b|[✕✗✖✘×●❌]\s|>{3} |Caused by:|Exception in thread |panic: "
    r"|goroutine \d+ \[|not ok\b(?= \d| -|\s*$)"
    r"|Traceback \(most recent call last\)|(?:[\w.$]+\.)?[A-Z]\w*(?:Error|Exception|Failure|Fault)\b[:!]?"
    r"|thread '[^']*'(?: \(\d+\))? panicked|error(?:\[E\d+\]|\s+TS\d+)?:|fatal:|FAILURE:|B(?:UILD|uild) FAIL"
    # PHPUnit's verdict; dotnet test's failed test (`  Failed Ns.Test [12 ms]`) and verdict
    r"|(?:FAILURES|ERRORS)!|Failed \S+ \[|Failed! +- Failed:"
    # rspec's failed examples (`rspec ./spec/x_spec.rb:10 # User validates email`), Elixir's
    # `** (CompileError) lib/app.ex:3: ...`, minitest's `  1) Failure:` / `  2) Error:`
    r"|rspec \./\S+:\d+ #|\*\* \([A-Z][\w.]*(?:Error|Exception)\) |\d+\) (?:Failure|Error):$"
    # pnpm's ` ERR_PNPM_NO_OFFLINE_META  Failed to resolve ...`, ` ELIFECYCLE  Test failed. ...`; apt's
    # `E: Unable to locate package libfoo-dev`
    r"|ERR_PNPM_[A-Z_]+ |ELIFECYCLE |E: \S"
    # pytest-xdist's `[gw1] [ 50%] FAILED tests/x.py::t`; bun's `(fail) suite > test [0.12ms]`; prove's
    # `Result: FAIL`, `Dubious, test returned 1 (wstat 256, 0x100)`, `Failed 1/3 subtests`, Test::More's
    # `#   Failed test 'name'` and `# Looks like you failed 1 test of 3.`; automake's `# FAIL:  1`
    r"|\[gw\d+\] \[ *\d+%\] (?:FAILED|ERROR) |\(fail\) |Result: FAIL\b|Dubious, test returned [1-9]"
    r"|Failed [1-9]\d*/\d+ subtests|#\s+Failed test\b|# Looks like you failed [1-9]"
    r"|# (?:FAIL|ERROR|XPASS): +[1-9]"
    # vstest's verdict, .NET's crash, R's `Error in f(x) : ...` and `Execution halted`, kubectl's
    r"|Test Run Failed\.|Unhandled exception\. |Error in .+ : |Execution halted\s*$|Error from server \("
    # a C++ program's end on an exception; abort() from the shell (`Aborted (core dumped)`)
    r"|terminate called after throwing|Aborted(?: \(core dumped\))?\s*$"
    # git: a merge's conflicts, a push refused
    r"|CONFLICT \([\w/ -]+\): |Automatic merge failed;|! \[(?:remote )?rejected\] "
    # black's verdict; cabal's and stack's; coverage.py's `--fail-under`; the go command's own errors
    r"|Oh no! 💥|Test suite \S+: FAIL\b|Test suite failure for package |Coverage failure: "
    r"|go: .*(?:: not found|error loading|missing go\.sum entry|unknown revision|invalid version)"
    r"|timeout: the monitored command dumped core"
    # GoogleTest's failed test and its list (`[  FAILED  ] Suite.Test (0 ms)`); Sphinx's `-W`;
    # ssh's and sudo's own refusals
    r"|\[ +FAILED +\] |Warning, treated as error:"
    r"|ssh: (?:connect to host \S+ port \d+: |Could not resolve hostname )"
    r"|sudo: (?:a terminal is required|a password is required|\d+ incorrect password)"
    # esbuild's `X [ERROR] Could not resolve "x"` (`✘` above where the terminal has it); vite's
    # `error during build:`; yarn 1's own errors (`error Couldn't find package "x" ...`, `error
    # https://registry...: Not found`); Xcode's `** TEST FAILED **` and `Testing failed:`; Mix's
    # `** (Mix) "mix test" failed`; Ant's and old Gradle's verdict; ESLint's crash; node-gyp's
    r"|X \[ERROR\] |error during build:|error (?:[A-Z]|/|https?://)|\*\* [A-Z]+(?: [A-Z]+)? FAILED \*\*"
    r"|Testing failed:|\*\* \(Mix\) |BUILD UNSUCCESSFUL\b|Oops! Something went wrong!"
    r"|(?:node-pre-)?gyp ERR! (?:[\w-]+ error\b|not ok\b)"
    # the Dart analyzer's `  error - lib/a.dart:3:5 - Undefined name 'x'. - undefined_identifier` (and
    # its older `error • ... • lib/a.dart:3:5 • code`)
    r"|error (?:- \S+:\d+:\d+ - |• )"
    # the Go race detector's report; gotestsum's sections of failed tests; Ginkgo's location of a
    # failure (`In [It] at: x_test.go:661`), its summary and its last line; docker's daemon refusing;
    # a suite's own `TEST FAILURE: ...`; Rust's x.py; the failed test's header of Node.js's test.py
    r"|WARNING: DATA RACE|={3} (?:Failed|Errors)\s*$|In \[[A-Za-z]+\] at: \S+:\d+"
    r"|Summarizing \d+ Failures?:|Test Suite Failed|Error response from daemon: |TESTS? FAIL(?:URE|ED)\b"
    r"|Bootstrap failed while executing|Build completed unsuccessfully in "
    r"|={3} (?:release|debug) \S+ ={3}\s*$"
    # faulthandler's stack of the thread that crashed (after `Fatal Python error: Segmentation fault`)
    r"|Current thread 0x[0-9a-f]+ \(most recent call first\):)"
    # (`x.cc:10: Failure`: GoogleTest's location of a failed expectation)
    r"|[^\s:]+:\d+(?::\d+)?:? (?:error|fatal|Error|Failure$|E\d+|[A-Z]\w*(?:Error|Failure|Exception))\b"
    r"|[ \t]+\d+:\d+[ \t]+error[ \t]{2,}\S"  # eslint's stylish format `  3:7  error  'x' is ...`, yamllint's
)
# a linter's or compiler's diagnostic, which need hold no error word: `x.py:1:8: F401 ...` (flake8,
# ruff's concise format, pylint's `C0114:`: a path, then this); Go's `./x.go:5:2: undefined: f` (its
# compiler and vet write no word of the kind, and no warnings); ruff's full format: the rule code
# first (_LINT_RULE), ` --> x.py:1:8` on the next line (_LINT_LOCATION); Kotlin's `e: File.kt...`
_LINT_AT: Final = re.compile(r":\d+:\d+(?::? [A-Z]{1,3}\d{3,4}\b|:( )\S)")  # group 1: a Go file's, below
_LINT_PATH: Final = re.compile(r"[^\s:]+")
_LINT_RULE: Final = re.compile(r"[A-Z]{1,3}\d{3,4} ")
_LINT_LOCATION: Final = re.compile(r" ?--> [^\s:]+:\d+:\d+$", re.M)
# failures anywhere in a line, each behind a word its lower-cased line must hold (cheap `in` tests first:
# one big alternation would be tried at every character)
_FAILURE_ANY: Final = tuple(
    (key, re.compile(pattern))
    for key, pattern in (
        (
            "err",
            r"(?:error|Error|ERROR)(?:\[E\d+\]| [A-Z]{1,4}\d{3,5})?: |npm (?:ERR!|error )|AssertionError"
            # `error CS0103:` (MSBuild's codes), MSBuild's `1 Error(s)`, CMake's `CMake Error at x:3`
            r"|[1-9]\d* (?:errors?\b|Error\(s\))|\bError at [^\s:]+:\d+"
            r"|Configuring incomplete, errors occurred|\sERROR(?: +\[ *\d+%\])?\s*$"
            r"|^Errors while running CTest",  # ctest's last line when a test failed
        ),
        ("fatal", r"(?:fatal|FATAL): "),
        # make's `make: *** [Makefile:3: all] Error 1`; ctest's verdict on a test: `12/302 Test  #12:
        # name .....***Failed  0.01 sec`, `***Timeout`, `***Exception: SegFault`, `***Not Run`
        ("***", r"make(?:\[\d+\])?: \*\*\*|\.{3,} *\*\*\*(?:Failed|Exception|Timeout|Not Run)\b"),
        # ctest's summary
        ("the following tests failed", r"^The following tests FAILED:"),
        ("panicked", r"panicked at"),
        ("segmentation", r"Segmentation fault"),
        ("killed", r"^\s*Killed\s*$|\b\d+ Killed\s|\bOOMKilled\b"),  # a shell's SIGKILL, Kubernetes' OOM kill
        ("aborted", r"\b\d+ Aborted\s"),  # bash's `line 1:  6863 Aborted   ./a x` (a SIGABRT)
        ("sanitizer", r"\b(?:Address|Thread|Memory|Leak|UndefinedBehavior)Sanitizer: "),
        ("definitely lost", r"definitely lost: [1-9]"),  # valgrind's leak summary
        # C's assert() (glibc's, then the BSDs' and macOS's), ExUnit's
        ("assertion", r"Assertion [`'].*' failed|Assertion failed: \(|Assertion with \S+ failed"),
        # glibc's heap checks and stack protector, which abort the program
        ("double free", r"double free (?:detected|or corruption)"),
        ("(): ", r"^\w+\(\): (?:corrupted|invalid) (?:\w+ )*(?:size|pointer|chunks?)\b"),
        ("stack smashing", r"\*\*\* stack smashing detected \*\*\*"),
        ("failed=", r"\bunreachable=\d+ +failed=[1-9]|\bunreachable=[1-9]"),  # Ansible's PLAY RECAP
        # the linker's missing library (GNU ld, then Apple's)
        ("ld", r"\bld(?:\.\w+)?: (?:cannot find -l|library not found for -l)|symbol\(s\) not found for arch"),
        ("cannot find module", r"Cannot find module '"),  # node, jest
        ("marked build as failure", r"marked build as failure"),  # Jenkins
        ("_test.go:", r"^\s+[\w.-]+_test\.go:\d+: "),  # a Go test's t.Errorf
        (
            "could not resolve",
            r"Could not resolve (?:dependencies for project|all (?:files|dependencies|artifacts))",
        ),
        ("failed asserting", r"Failed asserting that"),  # PHPUnit
        ("test case '", r"Test Case '.+' failed \("),  # XCTest
        (") test ", r"^\s*\d+\) test .+ \([\w.]+\)$"),  # ExUnit's failed test
        ("] › ", r"^\s*\d+\) \[[\w .-]+\] › "),  # Playwright's failed test
        ("timed out retrying", r"Timed out retrying after \d+ms: "),  # Cypress
        # pytest-cov's and jest's coverage thresholds; GitHub Actions' time limit
        ("cov", r"Required test coverage of \S+ not reached|coverage threshold for \w+ \(\S+\) not met"),
        ("maximum execution time", r"has exceeded the maximum execution time of"),
        ("non-zero code", r"returned a non-zero code: [1-9]"),  # docker build's legacy builder
        ("exitfailure", r"ExitFailure [1-9]"),  # Haskell's
        ("not found", r"^(?:\S*/)?(?:ba|da)?sh: (?:line )?\d+: .+: not found$"),  # dash's command not found
        ("unable to resolve host", r"unable to resolve host address"),  # wget
        ("complete successfully", r"didn't complete successfully: exit [1-9]"),  # docker compose
        ("an error occurred (", r"^An error occurred \(\w+\) when calling the \w+ operation"),  # AWS CLI
        ("there were failing tests", r"There were failing tests\."),  # Gradle's test task
        ("failed with errors", r"YN0000: .*Failed with errors in "),  # yarn 2+'s verdict
        ("non-zero", r"exited with (?:a )?non-zero (?:exit )?(?:status|code)"),
        ("too long with no output", r"^Too long with no output \(exceeded "),  # CircleCI's no-output timeout
        # actionlint's `ci.yml:12:5: property "foo" is not defined [expression]`, yamllint's parsable format
        ("ml:", r"\.ya?ml:\d+:\d+: (?:\[error\] |.+ \[[a-z][\w-]*\]$)"),
        (
            "exit",
            r"(?:[Ee]xit(?:ed)?|exiting) (?:with )?(?:(?:exit )?code|status):? -?[1-9]|with exit code"
            r"|\bexited with -?[1-9]\d*\.?\s*$",  # Travis' `The command "npm test" exited with 1.`
        ),
        ("returned", r"[Rr]eturned (?:with )?(?:(?:exit )?code|status):? -?[1-9]"),
        ("terminated", r"terminated (?:with )?(?:(?:exit )?code|status):? -?[1-9]"),
        (
            "fail",
            r"[1-9]\d* (?:of \d+ )?(?:tests? )?(?:failed|failing|failures?)\b|[Tt]ests? failed\b|BUILD FAIL"
            r"|\.{4,} *(?:Failed|FAILED|FAIL) *$|[Ff]ailed to "
            r"|(?:[Cc]ommand|[Ss]tep|[Jj]ob|[Bb]uild|[Cc]ompilation) failed"
            r"|: *(?:FAILURE|FAILED)\b|\b(?:Failures|Errors|Failed): +[1-9]"  # `Tests: 5, Failures: 1.`
            # a test's verdict at the line's end (Gradle's `Test > posts() FAILED`, `> Task :app:test
            # FAILED`, pytest -v's `test_x.py::test_y FAILED [ 50%]`), Gradle's `* What went wrong:`
            r"|\sFAILED(?: +\[ *\d+%\])?\s*$|Execution failed for task"
            # tox 4: `py311: FAIL code 1 (3.2 seconds)`, `py311: FAIL ✖ in 3.2 s`, `evaluation failed :(`
            r"|: FAIL (?:code -?[1-9]|✖ in )|evaluation failed :\("
            # Bazel's `//pkg:x_test    FAILED in 0.5s`, `... 12 tests pass and 2 fail locally.`
            r"|\sFAILED in \d|\band [1-9]\d* fails? (?:locally|remotely)\b"
            # unittest -v's `test_x (pkg.Test.test_x) ... FAIL`; Jest's `› 2 snapshots failed from 1
            # test suite.`
            r"|\s\.{3} FAIL\s*$|[1-9]\d* snapshots? failed\b",
        ),
        ("....", r"\.{4,} *(?:ERROR|Error) *$"),
        (" ... error", r"\s\.{3} ERROR\s*$"),  # unittest -v's test in error
        ("race detected", r"race detected during execution of test"),  # Go's testing with -race
        # pnpm audit's and yarn audit's verdict
        ("vulnerabilit", r"^\s*[1-9]\d* vulnerabilit(?:y|ies) found\b"),
        # a checker's verdict: spring-javaformat's `Formatting violations found in the following files:`,
        # Spotless' `The following files had format violations:`, Checkstyle's and PMD's `You have 3
        # Checkstyle violations.`, `There are 2 PMD violations.`, Gradle's dependency analysis' `There
        # were dependency violations.` (not `There were no violations.`)
        (
            "violation",
            r"[Ff]ormat(?:ting)? violations\b"
            r"|\b(?:You have|There (?:were|was|are|is)) (?!no |0 )(?:[1-9]\d* )?(?:[\w-]+ )?violations?\b",
        ),
        ("denied", r"(?:Permission|permission|Access|access) denied"),
        ("undefined", r"undefined reference to [`']|Undefined symbols for architecture"),  # the linker's
        ("multiple definition", r"multiple definition of [`']"),
        ("unresolved external", r"unresolved external symbol"),
        ("reformat", r"^(?:[Ww]ould reformat:? \S|unformatted: )|[1-9]\d* files? would be reformatted"),
        ("code style issues", r"Code style issues found"),  # prettier --check
        ("not accessible", r"not accessible"),
        ("http ", r"HTTP [45]\d\d\b"),
        ("command not found", r"command not found"),
        ("no such file", r"No such file or directory"),
        ("assert", r"assert(?:ion)? failed"),
        ("no tests found", r"No tests found"),
    )
)
# a runner's advice after a failure (how to see more, where help is, how to resume): tried with .match
ADVICE: Final = re.compile(
    r"[ \t]*(?:\[(?:ERROR|FATAL|error)\]|npm ERR!|npm error)[ \t]*(?:$"
    r"|(?:To see the full stack trace of the errors, )?[Rr]e-?run \S+ (?:with|using) (?:the )?-\w+ "
    r"(?:switch|option)"
    r"|For more information about the errors and possible solutions"
    r"|(?:-> )?\[Help \d+\](?: https?://\S+)?$"
    r"|After correcting the problems, you can resume the build|Please refer to "
    r"|A complete log of this run can be found in|To see a list of scripts, run:|Run \"npm help"
    r")"
)
# a CI runner's housekeeping: lines it writes around every step, which say nothing about any
HOUSEKEEPING: Final = re.compile(
    r"(?:##\[endgroup\]|::endgroup::|Post job cleanup\.|Cleaning up orphan processes"
    r"|Terminate orphan process: pid \(\d+\) \([^)]*\)|shell: [^\n]*\{0\}"  # (a step's shell)
    r"|info Visit https://yarnpkg\.com/\S+ for documentation about this command\."  # (yarn 1's)
    # GitLab's: a section's end, the runner's clean-up after every job (its header, then the title)
    r"|section_end:\d+:\S+|(?:section_start:\d+:cleanup_file_variables\S*\s+)?"
    r"Cleaning up (?:project directory and )?file based variables)\s*$"
)
HOUSEKEEPING_WORDS: Final = (
    "##[endgroup]", "::endgroup::", "Post job cleanup.", "Cleaning up orphan processes",
    "Terminate orphan process", "shell: ", "for documentation about this command.", "section_end:",
    "Cleaning up project directory", "Cleaning up file based variables",
)  # fmt: skip
_MENTION: Final = re.compile(
    r"(?i:\b(?:errors?|exception|traceback|fatal|critical|fail(?:ed|ure|ing)?|panic|denied|refused"
    r"|abort(?:ed)?|timed out|timeout|killed|invalid|cannot|could not|unable)\b)",
    re.M,
)
_PASS: Final = re.compile(
    r"(?:^[ \t]*(?:PASS(?:ED)?\b|ok\b|[✓✔√]|\[ *(?:PASSED|OK) *\])|\bPASSED\b|\.\.\. ok$|\bok$)", re.M
)
_ZERO: Final = re.compile(
    r"(?i:(?<![\w.])0 (?:failed|errors?|failures?)\b|\b(?:failures|errors|failed): 0\b)"
)
# a tally of failures ("3 failed", "Found 2 errors", "1 of 10 tests failed", "hook....Failed"): a verdict
TALLY: Final = re.compile(
    r"(?<![\w.])[1-9]\d* (?:of \d+ )?(?:tests? )?(?:failed|failing|errors?|failures?)\b"
    r"|\.{4,} *(?:Failed|FAILED)"
)
STEP: Final = re.compile(
    r"^(?:##\[group\]Run |Run |::group::|Step \d+/\d+ ?:|\$ |> Task :|section_start:\d+:"
    r"|\[Pipeline\] stage|--- )"
)
CI_ERROR: Final = re.compile(r"^(?:##\[error\]|::error\b)")
SETUP_STEP: Final = re.compile(
    r"^##\[group\]Run (?:actions/(?:checkout|setup-\w+|cache|upload-artifact|download-artifact)|"
    r"[\w-]+/(?:setup|install|cache)[\w-]*)@"
)


@dataclass
class Lines:
    """A log body as original lines, clean lines and the class of each line."""

    raw: list[str]
    clean: list[str]
    text: str  # the clean lines joined
    shown: list[str]  # what a rendering shows of each line: the original without leading stamps or colours
    hinted: list[bool]  # holds an error word (the lines the classes were looked for in)
    failure: list[bool]
    mention: list[bool]
    passing: list[bool]
    advice: list[bool]  # a runner's advice after a failure (ADVICE) or its housekeeping (HOUSEKEEPING):
    # no part of the log's ending or a failure's context


_HINTS: Final = (  # looked for in the lower-cased text: lines without any of these are neither class
    "error", "fail", "fatal", "panic", "exit", "returned", "terminated", "denied", "exception", "traceback",
    "caused by", "goroutine", "fault", "http 4", "http 5", "not accessible", "not found", "no such file",
    "assert", "err!", "***", ">>> ", "●", "✕", "✗", "✖", "×", "❌", "critical", "refused", "abort",
    "timed out", "timeout", "killed", "invalid", "cannot", "could not", "unable", "not ok",
    "undefined reference", "undefined symbols", "multiple definition", "unresolved external",
    "reformat", "code style issues", "rspec ./", "err_pnpm_", "sanitizer", "definitely lost", "oh no!",
    "_test.go:", "] › ", "not reached", "coverage threshold", "maximum execution time",
    "conflict (", "rejected] ", "execution halted", "terminate called", ".yml:", ".yaml:", ") test ",
    "missing go.sum", "unknown revision", "invalid version", "double free", "corrupted", "sudo: ",
    "unsuccessful", "oops! something went wrong", "too long with no output", "data race", "race detected",
    "] at: ", "=== release ", "=== debug ", "vulnerabilit", "violation", "most recent call first",
)  # fmt: skip
_CLASSIFIED_MAX: Final = 15_000  # hint lines classified at each end of a text (the rest: mentions)
_SCAN_CHARS: Final = 4000  # of a line, what the classifiers read (a longer line is judged by its start)


def _candidates(text: str) -> list[int]:
    """Lines holding a hint word: a cheap pre-filter before the regexes."""
    low = text.lower()  # (may differ in length from text: line starts are counted on it)
    starts = line_starts(low.split("\n"))
    found = lines_with(low, _HINTS, starts)
    found |= {i + 1 for i in lines_with(low, ("\ne  ",), starts)}  # pytest's "E   ..." lines
    return sorted(found | ({0} if low.startswith("e  ") else set()))


def _lint_lines(text: str, lines: list[str]) -> list[int]:
    """Lines of `text` (split into `lines`) that are a linter's diagnostics. Literal-led searches, each
    candidate's line checked after: a regex anchored at every line start costs five times as much."""
    found: list[int] = []
    for m in _LINT_AT.finditer(text):
        start = text.rfind("\n", 0, m.start()) + 1
        go = m.group(1) is not None  # `path:1:2: message`: a diagnostic only in a Go file
        if _LINT_PATH.fullmatch(text, start, m.start()) and (
            not go or text.endswith(".go", start, m.start())
        ):
            found.append(start)
    pos = 0 if text.startswith("e: ") else text.find("\ne: ")
    while pos >= 0:  # Kotlin's compiler: `e: /src/App.kt: (12, 5): Unresolved reference: foo`
        found.append(pos if pos == 0 else pos + 1)
        pos = text.find("\ne: ", pos + 1)
    pos = text.find("-->")
    while pos >= 0:
        start = text.rfind("\n", 0, pos) + 1
        if start > 0 and _LINT_LOCATION.match(text, start):
            rule = text.rfind("\n", 0, start - 1) + 1
            if _LINT_RULE.match(text, rule):
                found.append(rule)
        pos = text.find("-->", pos + 3)
    if not found:
        return []
    starts = line_starts(lines)
    return [bisect_right(starts, pos) - 1 for pos in found]


def _is_failure(line: str) -> bool:
    if _FAILURE_START.match(line):
        return True
    low = line.lower()
    return any(key in low and rx.search(line) for key, rx in _FAILURE_ANY)


def housekeeping(clean: Sequence[str], words_at: Iterable[int], failing: Callable[[int], bool]) -> list[int]:
    """The lines of a runner's housekeeping (HOUSEKEEPING), and what its post-job steps print after
    `Post job cleanup.` (the checkout's git commands that remove its credentials, a cache's upload)
    up to the next step, in clean lines (`words_at`: the lines holding one of HOUSEKEEPING_WORDS):
    neither says why the job failed. A line `failing` says is a failure stays one."""
    found: list[int] = []
    done = 0
    for i in sorted(words_at):
        if i < done or not HOUSEKEEPING.match(clean[i]) or failing(i):
            continue
        found.append(i)
        if clean[i].startswith("Post job cleanup."):
            j = i + 1
            while j < len(clean) and not clean[j].startswith(("##[group]Run ", "##[error]")):
                if clean[j].strip() and not failing(j):
                    found.append(j)
                j += 1
            done = j
    return found


def is_failure(line: str) -> bool:
    """Whether a clean line says a failure by its own structure (a rougher test than classify's:
    no pass, zero-tally or linter checks), for callers that judge a few lines."""
    return _is_failure(line[:_SCAN_CHARS])


def classify(raw: list[str], clean_text: str) -> Lines:
    clean = clean_text.split("\n")
    n = len(clean)
    failure = [False] * n
    mention = [False] * n
    passing = [False] * n
    hinted = [False] * n
    advice = [False] * n
    found = _candidates(clean_text)
    if len(found) > 2 * _CLASSIFIED_MAX:  # bounded work: the middle ones only count as mentions
        for i in found[_CLASSIFIED_MAX:-_CLASSIFIED_MAX]:
            hinted[i] = mention[i] = True
        found = found[:_CLASSIFIED_MAX] + found[-_CLASSIFIED_MAX:]
    for i in found:
        hinted[i] = True
        line = clean[i][:_SCAN_CHARS]
        if ADVICE.match(line):
            advice[i] = True  # "[ERROR] Re-run Maven using the -X switch": neither a failure nor a mention
            continue
        mention[i] = _MENTION.search(_ZERO.sub("", line) if _ZERO.search(line) else line) is not None
        passing[i] = _PASS.search(line) is not None and not CI_ERROR.match(line)
        if passing[i] or not _is_failure(line):
            continue  # "test_error_handling PASSED": a pass, whatever its name says
        if not (_ZERO.search(line) and not _is_failure(_ZERO.sub("", line))):
            failure[i] = True  # (not "Failures: 0, Errors: 0")
    for i in _lint_lines(clean_text, clean):
        if not passing[i]:
            hinted[i] = failure[i] = True
    words_at = lines_with(clean_text, HOUSEKEEPING_WORDS, line_starts(clean))
    for i in housekeeping(clean, words_at, failure.__getitem__):
        advice[i] = True
    # what a line shows is its clean form (clean.clean_text: no colours, no leading stamps), but for
    # carriage returns inside it, which cleaning turns into spaces: such a line keeps them
    shown = clean
    if any("\r" in ln for ln in raw):
        shown = [stamp_free(uncoloured(r)) if "\r" in r[:-1] else c for r, c in zip(raw, clean, strict=True)]
    return Lines(raw, clean, clean_text, shown, hinted, failure, mention, passing, advice)


def step_spans(clean: Sequence[str]) -> list[tuple[int, int]]:
    """[start, end) of each CI step (from its `##[group]Run ...` header to the next), if any, in lines
    without their leading stamps."""
    heads = [i for i, ln in enumerate(clean) if ln.startswith("##[group]Run ")]
    return [(start, heads[k + 1] if k + 1 < len(heads) else len(clean)) for k, start in enumerate(heads)]


def setup_lines(clean: Sequence[str], spans: Sequence[tuple[int, int]]) -> set[int]:
    """A CI log's set-up: its lines before the first step and the set-up steps (checkout, setup-*,
    caches, artifacts) that reported no error, in lines without their leading stamps (`spans`: their
    step_spans). What they say (the runner's versions, the checkout's paths) is noise to whoever
    reads why the job failed."""
    if not spans:
        return set()
    setup = set(range(spans[0][0]))
    for start, end in spans:
        if SETUP_STEP.match(clean[start]) and not any(CI_ERROR.match(clean[i]) for i in range(start, end)):
            setup.update(range(start, end))
    return setup


def indent(line: str) -> int:
    return len(line) - len(line.lstrip())
