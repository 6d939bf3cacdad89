"""Key-fact extraction on real tool outputs (with planted sentences) from /work/shared/trajectories."""

from __future__ import annotations

import pytest

from summarizer.facts import FACT_MAX_CHARS, FactPools, extract_facts, extract_statements, fact_source
from tests.fixtures.trajectories import load as _load
from tests.fixtures.trajectories import mini

PORT = "The secret port is 48213."
DECISION = "We decided to use sqlite WAL mode."
ERROR = "Error: ZeroDivisionError in compute_total()"


def maven_915k() -> str:
    content: str = _load("openhands-nunu0404/output.jsonl")[0]["history"][24]["content"]
    return content


def plant(text: str, *sentences: str) -> str:
    """Insert the sentences as lines in the middle of `text`."""
    cut = text.rfind("\n", 0, len(text) // 2) + 1
    return text[:cut] + "".join(s + "\n" for s in sentences) + text[cut:]


def test_planted_facts_in_a_real_pytest_run_are_extracted() -> None:
    text = plant(mini("pytest-dev__pytest-6197", 109), PORT, DECISION, ERROR)
    facts = extract_facts(text)
    assert ERROR in facts
    assert DECISION in facts
    assert any("48213" in f and "port" in f for f in facts)
    # and the real ones
    assert "UnboundLocalError: local variable 'm' referenced before assignment" in facts
    assert "/testbed/testing/test_collection.py" in facts
    assert "3.9.20" in facts and "2 failed" in facts and "exit code 1" in facts


def test_errors_and_decisions_come_first() -> None:
    facts = extract_facts(plant(mini("pytest-dev__pytest-6197", 109), PORT, DECISION, ERROR))
    first_error = facts.index("UnboundLocalError: local variable 'm' referenced before assignment")
    assert first_error == 0
    assert facts.index(ERROR) < facts.index(DECISION) < facts.index("/testbed/testing/test_collection.py")
    assert facts.index("/testbed/testing/test_collection.py") < facts.index("3.9.20")


def test_planted_error_in_the_middle_of_915k_chars_is_found() -> None:
    facts = extract_facts(plant(maven_915k(), ERROR))
    assert ERROR in facts
    assert "com.alibaba.fastjson2.JSONException: not support type : OBJECT_END -91, offset 55/55" in facts
    assert len(facts) <= 40


def test_unittest_errors_paths_identifiers() -> None:
    facts = extract_facts(mini("psf__requests-1142", 63))
    assert "AttributeError: module 'collections' has no attribute 'Callable'" in facts
    assert "TypeError: HTTPConnection.__init__() got an unexpected keyword argument 'strict'" in facts
    assert "FAILED (errors=21)" in facts
    assert "/testbed/requests/models.py" in facts
    assert "requests.get()" in facts


def test_lines_differing_only_in_numbers_are_one_error() -> None:
    log = _load("openhands-nunu0404/output.jsonl")[0]["history"][20]["content"]  # maven checkstyle failure
    facts = extract_facts(log)
    assert sum("Line contains carriage return" in f for f in facts) == 1
    assert any(f.startswith("[ERROR] Failed to execute goal") for f in facts)
    url = "http://cwiki.apache.org/confluence/display/MAVEN/MojoFailureException"
    assert sum(url in f for f in facts) == 1, "kept once: not echoed beside the error line holding it"
    assert "2.0.52-SNAPSHOT" in facts


def test_diff_paths_lose_git_prefixes() -> None:
    diff: str = _load("mini-swe-agent/psf__requests-1142.traj.json")["info"]["submission"]
    facts = extract_facts(diff)
    assert "requests/models.py" in facts
    assert not any(f.startswith(("a/", "b/")) for f in facts)


def test_decisions_in_agent_messages() -> None:
    messages = _load("mini-swe-agent/django__django-15629.traj.json")["messages"]
    thoughts = "\n".join(m["content"] for m in messages if m["role"] == "assistant")
    facts = extract_facts(thoughts)
    assert "If the PK has `db_collation='utf8_bin'`, the FK must also have it." in facts
    assert any("django/db/models/fields/related.py" in f for f in facts)


def test_cap_length_dedupe_and_determinism() -> None:
    text = plant(mini("sympy__sympy-13091", 87), PORT, DECISION, ERROR, DECISION, ERROR)
    for cap in (1, 5, 12, 40, 100):
        facts = extract_facts(text, max_facts=cap)
        assert len(facts) <= cap
        assert len({f.lower() for f in facts}) == len(facts)
        assert all(0 < len(f) <= FACT_MAX_CHARS for f in facts)
        assert extract_facts(text, max_facts=cap) == facts
    assert extract_facts(text, max_facts=1) == [ERROR]


def test_long_lines_are_clipped() -> None:
    line = "ValueError: " + "x" * 500
    facts = extract_facts(plant(mini("pytest-dev__pytest-6197", 109), line))
    clipped = [f for f in facts if f.startswith("ValueError: xxx")]
    assert clipped == [line[: FACT_MAX_CHARS - 1] + "…"]


def test_nothing_to_extract() -> None:
    assert extract_facts("") == []
    assert extract_facts(mini("pytest-dev__pytest-6197", 109), max_facts=0) == []
    assert extract_facts("ok") == []


@pytest.mark.parametrize(
    "text",
    ["Error" * 50_000, "[" * 100_000, "a/" * 100_000, "9" * 100_000, "\n" * 100_000, "must " * 50_000],
    ids=["error-words", "brackets", "slashes", "digits", "newlines", "must"],
)
def test_degenerate_inputs(text: str) -> None:
    facts = extract_facts(text, max_facts=10)
    assert len(facts) <= 10
    assert all(len(f) <= FACT_MAX_CHARS for f in facts)


def test_stated_facts_are_kept_as_whole_sentences() -> None:
    text = (
        "Ran the tests.\n"
        "The expected checksum of the fixture archive is 9f2c41b7e5d0a388.\n"
        "Let's look at the file now.\n"
        "The person on call this week is Tamsin Okonkwo-Reyes, reachable via pager 7719.\n"
        "This is a plain sentence with nothing special in it.\n"
        "x = compute(a, b)  # The value 12345 is used here.\n"
    )
    facts = extract_facts(text)
    assert "The expected checksum of the fixture archive is 9f2c41b7e5d0a388." in facts
    assert "The person on call this week is Tamsin Okonkwo-Reyes, reachable via pager 7719." in facts
    assert "This is a plain sentence with nothing special in it." not in facts, "nothing specific"
    assert not any(f.startswith("x = compute") for f in facts), "code is not a statement"
    assert not any(f in g and f != g for f in facts for g in facts), "no fact echoes another"


def test_questions_and_musings_are_not_statements() -> None:
    text = (
        "Maybe it is registered in `src/_pytest/python.py` or similar? It could be a plugin_hook.\n"
        "Wait, `pytest_pycollect_makemodule` IS a hook spec and it is defined once.\n"
        "The staging database for this task listens on port 54329, not on the default port.\n"
        "The release branch is named rel-quokka-2291 and must never be force-pushed.\n"
    )
    stated = extract_statements(text)
    assert not any(s.startswith("Maybe") for s in stated), "a question is not a statement"
    assert not any(s.startswith("Wait,") for s in stated), "thinking aloud is not a statement"
    assert stated[0].startswith("The staging database"), "plain statements in text order"
    assert len(stated) == 2


def test_pools_scanned_once_give_each_smaller_count_its_strongest_facts() -> None:
    """A digest's size search asks for several counts: one scan serves them all, and a smaller
    count's facts are the strongest of the same candidates (errors first)."""
    text = plant(mini("sympy__sympy-13091", 87), PORT, DECISION, ERROR)
    pools = FactPools(text, 40)
    assert pools.take(40) == extract_facts(text, 40)
    for n in (1, 5, 12, 30):
        facts = pools.take(n)
        assert len(facts) <= n and pools.take(n) == facts
        assert ERROR in facts
    assert pools.take(0) == [] and FactPools("", 40).take(5) == []


def _gha(lines: list[str]) -> str:
    return "\n".join(f"2026-04-23T08:31:{k % 60:02d}.{k:07d}Z {ln}" for k, ln in enumerate(lines))


def test_a_ci_log_s_set_up_is_no_source_of_key_facts() -> None:
    setup = ["Current runner version: '2.333.1'", "Image: ubuntu-24.04 Version: 20260415.520"]
    setup += ["##[group]Run actions/checkout@v4", "[command]/usr/bin/git version", "git version 2.53.0"]
    setup += ["Temporary home directory '/home/runner/work/_temp/dd2503ca-f956-4886-8fa7-906cab152ff5'"]
    setup += ["##[endgroup]"]
    failing = ["##[group]Run mypy pandas", "mypy pandas", "##[endgroup]"]
    failing += ['pandas/compat/pyarrow.py:76: error: Module has no attribute "is_null"  [attr-defined]']
    failing += [
        "Found 1 error in 1 file (checked 1458 source files)",
        "##[error]Process completed with exit code 1.",
    ]
    text = _gha(setup + failing)
    source = fact_source(text)
    assert source.count("\n") == text.count("\n")  # line for line: set-up lines left empty
    facts = extract_facts(source)
    assert 'pandas/compat/pyarrow.py:76: error: Module has no attribute "is_null" [attr-defined]' in facts
    assert not any("2.53.0" in f or "_temp" in f or "20260415" in f or "2.333.1" in f for f in facts)
    assert any("2.53.0" in f for f in extract_facts(text))  # (what the set-up gave before)
    wrapped = fact_source(f"<returncode>1</returncode>\n<output>\n{text}\n</output>")  # its envelope stays
    assert wrapped.startswith("<returncode>1</returncode>\n<output>\n\n") and "2.53.0" not in wrapped
    # a failing set-up step is no set-up: its lines are facts' source; text without steps is as it was
    broken = _gha([*setup[:-1], "##[error]Unable to clone the repository", *setup[-1:], *failing])
    assert "Unable to clone the repository" in fact_source(broken)
    assert fact_source("no steps here\n2.53.0") == "no steps here\n2.53.0"


def test_a_ci_log_s_housekeeping_is_no_source_of_key_facts() -> None:
    """A step's `shell:` line and what post-job steps print after `Post job cleanup.` (the checkout
    removing its credentials) are the runner's, in every job: their paths are no key facts. A post-job
    step that fails is no housekeeping."""
    failing = ["##[group]Run npm test", "npm test", "shell: /usr/bin/bash -e {0}", "##[endgroup]"]
    failing += ["src/ledger.test.js:12: AssertionError: expected 3 to equal 4"]
    failing += ["##[error]Process completed with exit code 1.", "Post job cleanup."]
    post = ["[command]/usr/bin/git config --local --name-only --get-regexp core\\.sshCommand"]
    post += ["Removing credentials config '/home/runner/work/_temp/git-credentials-5b03-4f53.config'"]
    post += ["[command]/usr/bin/git config --local --unset includeIf.gitdir:/home/runner/work/app/.git.path"]
    text = _gha([*failing, *post, "Cleaning up orphan processes"])
    source = fact_source(text)
    assert source.count("\n") == text.count("\n")
    facts = extract_facts(source)
    assert "src/ledger.test.js" in facts and "with exit code 1" in facts
    assert not any("/usr/bin/bash" in f or "git-credentials" in f or "includeIf" in f for f in facts), facts
    assert any("git-credentials" in f for f in extract_facts(text))  # (what the post-job steps gave before)
    broken = _gha([*failing, "Error: Failed to save cache: /home/runner/.npm/_cacache is not writable"])
    assert "Failed to save cache" in fact_source(broken)


def test_a_big_family_of_numbered_paths_leaves_room_for_the_others() -> None:
    """240 compiled files `mod000.c` ... `mod239.c` would take every path slot: two of them are key
    facts, and the paths named once (the failing build's) keep theirs; a few numbered ones stay."""
    text = "\n".join(f"cc -c src/gen/mod{i:03d}.c -o mod{i:03d}.o" for i in range(240))
    text += "\nsrc/net/port_parser.c:12:3: error: expected ';'\nsee docs/v1/api.md and docs/v2/api.md\n"
    facts = extract_facts(text, 40)
    assert sum(1 for f in facts if "src/gen/mod" in f) == 2
    assert any("src/net/port_parser.c" in f for f in facts)
    assert "docs/v1/api.md" in facts and "docs/v2/api.md" in facts


def test_issue_numbers_are_no_family() -> None:
    """`#1234` and `#1250` are two issues: numbers and URLs keep every slot they win."""
    text = "fixes " + " ".join(f"#{1200 + 10 * i}" for i in range(8)) + "\n"
    assert sum(1 for f in extract_facts(text, 40) if "#12" in f) == 8


def test_a_counter_on_every_line_is_a_family_not_issues() -> None:
    """ctest numbers every test (`12/302 Test  #12: name ...   Passed`): the same words before a
    `#N` on many lines make it a counter, of which two are kept, and the 300 of them neither fill the
    numbers' slots nor end the scan before the issue the log names further on."""
    row = "{0:3d}/300 Test {1:>4}: mod{0:03d}_roundtrip ......   Passed    0.00 sec"
    rows = [row.format(i, f"#{i}") for i in range(300)]
    text = "\n".join([*rows, "see #4711 for the flaky port test", "Merge pull request #4712 from x/y"])
    facts = extract_facts(text, 40)
    counters = [f for f in facts if f.startswith("#") and "#47" not in f]
    assert len(counters) == 2, facts
    assert "#4711" in facts and any("#4712" in f for f in facts), facts  # (`Merge pull request #4712`)


def test_a_url_names_a_host() -> None:
    """A shell expansion that strips a scheme (`${URL#https://}`) or a string a script builds a URL
    from holds `https://` with no host after it: no URL, no key fact; the real URL beside it is one."""
    text = "\n".join(
        [
            'echo "GH_HOST=${GITHUB_SERVER_URL#https://}" >> $GITHUB_ENV',
            "const url = 'https://' + host + '/api';",
            "Image Release: https://github.com/actions/runner-images/releases/tag/ubuntu24",
        ]
    )
    facts = extract_facts(text, 40)
    assert not any(f.startswith("https://") and len(f) < 12 for f in facts), facts
    assert "https://github.com/actions/runner-images/releases/tag/ubuntu24" in facts, facts
