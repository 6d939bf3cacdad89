"""Content-type detection on real tool outputs from /work/shared/trajectories."""

from __future__ import annotations

import json
from typing import Any

import pytest

from summarizer.detect import ContentKind, detect, split_envelope
from tests.fixtures.trajectories import load as _load
from tests.fixtures.trajectories import mini, openhands, submission


def swe_agent(index: int) -> str:
    content: str = _load("swe-agent/pydicom__pydicom-1458.traj")["history"][index]["content"]
    return content


OH = "openhands/output.jsonl"
NUNU = "openhands-nunu0404/output.jsonl"

CASES: list[tuple[str, Any, ContentKind]] = [
    # test runs: pytest, pytest behind the harness's "output too long" warning, Django, unittest, sympy, maven
    ("pytest failures", lambda: mini("pytest-dev__pytest-6197", 109), "test"),
    ("pytest truncated", lambda: mini("sphinx-doc__sphinx-9258", 195), "test"),
    ("django runtests", lambda: mini("django__django-15629", 97), "test"),
    ("unittest errors", lambda: mini("psf__requests-1142", 63), "test"),
    ("sympy bin/test", lambda: mini("sympy__sympy-13091", 87), "test"),
    ("maven surefire 915k", lambda: openhands(NUNU, 0, 24), "test"),
    # searches
    ("grep -r", lambda: mini("pytest-dev__pytest-6197", 13), "grep"),
    ("grep -r def", lambda: mini("sympy__sympy-13091", 39), "grep"),
    ("grep -n one file", lambda: openhands(NUNU, 0, 6), "grep"),
    ("pylint messages", lambda: mini("pylint-dev__pylint-6528", 11), "grep"),
    # diffs
    ("git diff", lambda: mini("django__django-15629", 101), "diff"),
    ("submission diff", lambda: submission("sympy__sympy-13091"), "diff"),
    ("868k submission diff", lambda: submission("psf__requests-1142"), "diff"),
    # file reads
    ("openhands cat -n", lambda: openhands(OH, 0, 13), "file"),
    ("nl -ba | sed -n", lambda: mini("sympy__sympy-13091", 19), "file"),
    ("sed -n slice", lambda: mini("django__django-15629", 21), "file"),
    ("cat python", lambda: mini("django__django-15629", 15), "file"),
    ("swe-agent open", lambda: swe_agent(12), "file"),
    # listings
    ("ls -la", lambda: mini("django__django-15629", 3), "listing"),
    ("ls -R", lambda: mini("pytest-dev__pytest-6197", 3), "listing"),
    ("ls -l", lambda: openhands(OH, 0, 5), "listing"),
    ("ls -la and find", lambda: openhands(NUNU, 0, 2), "listing"),
    ("ls names", lambda: mini("django__django-15629", 5), "listing"),
    # logs
    ("maven build failure", lambda: openhands(NUNU, 0, 20), "log"),
    ("script output", lambda: mini("pylint-dev__pylint-6528", 133), "log"),
    ("python traceback", lambda: mini("psf__requests-1142", 47), "log"),
    # prose
    ("assistant thought", lambda: mini("django__django-15629", 2), "prose"),
    ("format error message", lambda: mini("sphinx-doc__sphinx-9258", 51), "prose"),
]


@pytest.mark.parametrize(("name", "get", "kind"), CASES, ids=[c[0] for c in CASES])
def test_detects_real_outputs(name: str, get: Any, kind: ContentKind) -> None:
    text = get()
    assert detect(text) == kind
    assert detect(text) == detect(text)  # deterministic


def test_detects_real_json() -> None:
    history = _load(OH)[0]["history"]
    assert detect(json.dumps(history, indent=2)) == "json"
    tools = next(e for e in history if e.get("action") == "system")["args"]["tools"]
    assert detect(json.dumps(tools)) == "json"


def test_detects_json_lines_cut_from_a_real_log() -> None:
    lines = [ln for ln in openhands(NUNU, 0, 24).splitlines() if ln.startswith('{"availableBeginTime"')]
    assert len(lines) > 100
    assert detect("\n".join(lines)) == "json"


def test_empty_and_short_text_is_prose() -> None:
    assert detect("") == "prose"
    assert detect("   \n\n") == "prose"
    assert detect("Done.") == "prose"


def test_envelope_mini_swe_agent() -> None:
    text = mini("pytest-dev__pytest-6197", 109)
    env = split_envelope(text)
    assert env.prefix == "<returncode>1</returncode>\n<output>\n"
    assert env.suffix.startswith("</output>")
    assert env.prefix + env.body + env.suffix == text
    assert env.body.startswith("=====")


def test_envelope_harness_truncation_keeps_head_and_tail() -> None:
    text = mini("sphinx-doc__sphinx-9258", 195)
    env = split_envelope(text)
    assert env.prefix == "<returncode>1</returncode>\n"
    assert "4146 chars" in env.note
    assert "<warning>" not in env.body and "<output_head>" not in env.body
    assert env.body.startswith("=====") and "1 failed, 44 passed" in env.body
    assert env.dropped > 0


def test_envelope_openhands_read_and_swe_agent_footer() -> None:
    read = split_envelope(openhands(OH, 0, 13))
    assert read.hint == "file"
    assert read.prefix.startswith("Here's the result of running `cat -n` on /workspace/")
    assert read.suffix.startswith("<response clipped>")
    opened = split_envelope(swe_agent(12))
    assert opened.hint == "file"
    assert opened.prefix.startswith("[File: ")
    assert opened.suffix.rstrip().endswith("bash-$")
    assert opened.body.startswith("(272 more lines above)")


def test_unknown_text_is_all_body() -> None:
    env = split_envelope("plain text")
    assert (env.prefix, env.body, env.suffix, env.hint) == ("", "plain text", "", None)
