"""Scoring, density and relevance, on sections of the real trajectories."""

from __future__ import annotations

import asyncio
import itertools
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipc.context import Context
from ipc.sections import Section
from summarizer.digest import approx_tokens
from watcher.config.settings import RELEVANCE_METHODS as CONFIG_METHODS
from watcher.config.settings import CompactionConfig
from watcher.eval.trajectories import Trajectory, load
from watcher.planning import identifiers as ident_module
from watcher.planning.features import Features, features
from watcher.planning.identifiers import identifiers, terms
from watcher.planning.planner import Watermarks
from watcher.planning.relevance import RELEVANCE_METHODS, MentionModel, goal_indices
from watcher.planning.scoring import ScoreParams, Scorer, Valuation, score_params, turn_ages
from watcher.serve.session import Session, prepare_plan


@pytest.fixture(scope="module")
def sympy(trajectories: Path) -> Trajectory:
    return load(trajectories / "mini-swe-agent" / "sympy__sympy-13091.traj.json", count=approx_tokens)[0]


def test_identifiers_of_real_sections(sympy: Trajectory) -> None:
    by_id = {s.id: s for s in sympy.sections}
    assert {"basic.py", "__eq__"} <= identifiers(by_id["s00004"].text)  # the agent's own step
    out = identifiers(by_id["s00005"].text)  # `nl -ba sympy/core/basic.py`: code
    assert {"_sympify", "SympifyError", "__ne__"} <= out
    assert "__init__" not in identifiers("def __init__(self): pass")  # too generic to mean anything
    assert identifiers("the value is ok and nothing else") == frozenset()
    assert identifiers("see /testbed/sympy/core/basic.py line 3") == {"basic.py"}


def test_identifiers_of_different_sections_share_one_string() -> None:
    """The daemon keeps every section's identifiers while the section is in the context: a name
    that many sections hold (a file, a function) is stored once (sys.intern), not once a section."""
    # texts built at run time, so the names in them are distinct string objects
    a = identifiers("".join(["call ", "_sympify", "(x) in ", "basic", ".py"]))
    b = identifiers("".join(["raise ", "_sympify", " from ", "basic", ".py"]))
    shared = a & b
    assert shared == {"_sympify", "basic.py"}
    for name in shared:
        assert next(x for x in a if x == name) is next(x for x in b if x == name)


def test_terms_drop_stop_words() -> None:
    assert terms("The parser fails for THE input") == ["parser", "fails", "input"]


def test_noise_is_low_for_repeated_lines() -> None:
    progress = "\n".join(f"Downloading package {i % 3}%... please wait" for i in range(200))
    assert features(progress).noise < 0.2
    words = ["alpha", "beta", "gamma", "delta", "kappa", "sigma", "omega", "theta"]
    code = "\n".join(f"def {a}_{b}(request): return respond()" for a in words for b in words)
    assert features(code).noise == 1.0
    counters = "\n".join(f"def handler_{i}(request): return respond({i})" for i in range(50))
    assert features(counters).noise < 0.2  # digits are folded: these lines say the same thing


def test_turn_ages_count_llm_steps(sympy: Trajectory) -> None:
    secs = [s for turn in sympy.turns[:4] for s in turn]
    ages = turn_ages(secs)
    assert ages[-1] == 0 and ages[-2] == 0  # the last step and its output
    assert ages[2] == 2  # s00002: the first step, two steps ago
    assert ages[0] == ages[1] == 2  # system prompt and task: as old as the first step


def test_a_superseded_read_scores_lower_than_the_same_read_alone(sympy: Trajectory) -> None:
    """The first of two identical reads loses nothing the second does not still hold."""
    secs = [s for turn in sympy.turns[:6] for s in turn]
    read = next(s for s in secs if s.id == "s00005")
    again = [
        Section("again-call", "assistant", "THOUGHT: read it again", tokens=8, group="again"),
        replace(read, id="again-out", group="again"),
    ]
    alone = Scorer().scores(secs)[secs.index(read)]
    superseded = Scorer().scores([*secs, *again])[secs.index(read)]
    assert alone > 0
    assert superseded < 0.5 * alone


def test_what_the_agent_just_wrote_about_is_more_relevant_than_old_tool_output(sympy: Trajectory) -> None:
    secs = [s for turn in sympy.turns[:40] for s in turn]
    scorer = Scorer()
    v = scorer.valuation(secs)
    ages = turn_ages(secs)
    m = MentionModel()
    # the agent keeps writing about __eq__ and __ne__; `bench_basic` appeared once, in an `ls` output
    from watcher.planning.relevance import mentions

    feats = [scorer.features(s) for s in secs]
    p = mentions(secs, feats, ages, m, v.holders, {})
    assert p("__ne__") > 0.5
    assert p("bench_basic.py") <= m.p_cold * m.cold_cap
    goal_only = next(x for x in feats[1].idents if x not in p.youngest)
    assert p(goal_only) == m.p_goal
    assert goal_indices(secs) == [1]  # the task


def test_scores_are_deterministic_and_cached(sympy: Trajectory) -> None:
    secs = [s for turn in sympy.turns[:50] for s in turn]
    scorer = Scorer()
    first = scorer.scores(secs)
    assert scorer.scores(secs) == first == Scorer().scores(secs)
    assert all(x >= 0 for x in first)


def test_folded_sections_are_remembered(sympy: Trajectory) -> None:
    secs = [s for turn in sympy.turns[:20] for s in turn]
    scorer = Scorer()
    scorer.scores(secs)
    gone = secs[4:8]
    scorer.scores([s for s in secs if s not in gone])
    for s in gone:
        for x in scorer.features(s).idents:
            assert scorer.folded[x] >= 1


def test_region_value_never_decreases_as_the_region_grows(sympy: Trajectory) -> None:
    secs = [s for turn in sympy.turns[:60] for s in turn]
    v = Scorer().valuation(secs)
    for i in range(2, 60, 7):
        values = [v.region(i, j) for j in range(i + 1, min(i + 30, len(secs)))]
        assert all(b >= a - 1e-9 for a, b in itertools.pairwise(values))


def test_priority_weights_scale_the_score(sympy: Trajectory) -> None:
    secs = [s for turn in sympy.turns[:10] for s in turn]
    i = next(k for k, s in enumerate(secs) if s.id == "s00005")
    low = [replace(s, priority="low") if k == i else s for k, s in enumerate(secs)]
    assert Scorer().scores(low)[i] < Scorer().scores(secs)[i]


@pytest.mark.parametrize("method", RELEVANCE_METHODS)
def test_every_relevance_method_scores_real_sections(sympy: Trajectory, method: str) -> None:
    secs = [s for turn in sympy.turns[:30] for s in turn]
    scores = Scorer(ScoreParams(relevance=method)).scores(secs)
    assert len(scores) == len(secs) and max(scores) > 0


def test_recency_scores_decay_with_age(sympy: Trajectory) -> None:
    secs = [s for turn in sympy.turns[:30] for s in turn]
    rec = Scorer(ScoreParams(half_life_turns=4)).scores(secs, "recency")
    assert rec[-1] == 1.0 and rec[2] == pytest.approx(0.5 ** (28 / 4))


def test_config_keys_make_the_score_params() -> None:
    assert CONFIG_METHODS == RELEVANCE_METHODS
    p = score_params(CompactionConfig(weight_low=0.1, half_life_turns=8.0, relevance="bm25"))
    assert p.weights["low"] == 0.1 and p.half_life_turns == 8.0 and p.relevance == "bm25"
    assert score_params(CompactionConfig()) == ScoreParams()
    with pytest.raises(ValueError, match="relevance"):
        ScoreParams(relevance="embeddings")


# --- the fast paths compute exactly the plain definitions ------------------------------------------

_ALPHABET = "aZ_x9٣.-/ \t\n\r\x0b\x0c\x1c\x85\u2028#"
_WORDS = [
    "parse_args",
    "FooError",
    "getValue",
    "__eq__",
    "util.py",
    "core/basic.py",
    "a.b.c",
    "took",
    "12",
    "x" * 90,
]


def plain_identifiers(text: str) -> frozenset[str]:
    text = ident_module.window(text)
    out: set[str] = set()
    for m in ident_module._RUN.finditer(text):
        if "." in m[0] and len(m[0]) <= ident_module.MAX_FILE_RUN:
            out.update(ident_module._FILE.findall(m[0]))
    for m in ident_module._WORD.finditer(text):
        if ident_module._is_code_name(m[0]):
            out.add(m[0])
    return frozenset(out - ident_module.GENERIC)


def plain_features(text: str) -> Features:
    distinct: set[str] = set()
    count = 0
    for raw in re.split(r"[\r\n]+", ident_module.window(text)):
        line = raw.strip()
        if len(line) >= 8:
            count += 1
            distinct.add(re.sub(r"\d+", "#", line))
    return Features(tuple(sorted(plain_identifiers(text))), len(distinct), count)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_WORDS), st.text(_ALPHABET, max_size=12)), max_size=40))
def test_features_are_the_plain_definitions(parts: list[str]) -> None:
    text = " ".join(parts)
    assert identifiers(text) == plain_identifiers(text)
    assert features(text) == plain_features(text)


def test_features_of_real_sections_are_the_plain_definitions(sympy: Trajectory) -> None:
    for s in [s for turn in sympy.turns for s in turn]:
        assert features(s.text) == plain_features(s.text)


def plain_region(v: Valuation, i: int, j: int) -> float:
    """Valuation.region by its definition: count, in order; sum, in order."""
    inside: Counter[str] = Counter()
    for k in range(i, j):
        inside.update(v.shared[k])
    lost = [x for x, c in inside.items() if c >= v.holders[x]]
    value = exposed = 0.0
    for k in range(i, j):
        keep = v.keep[k]
        for x in v.shared[k]:
            if x in lost:
                keep *= 1.0 - v.p[x]
        value += v.base[k] * (1.0 - keep)
        exposed += v.exposed[k]
    exposed += sum(v.p[x] * v.folded.get(x, 0) for x in lost)
    return value + v.exposure * exposed


def test_region_values_are_the_plain_definition_bit_for_bit(sympy: Trajectory) -> None:
    secs = [s for turn in sympy.turns[:80] for s in turn]
    scorer = Scorer()
    scorer.scores(secs)
    kept = [s for k, s in enumerate(secs) if not 10 <= k < 40]  # folded before: exposure counts
    v = scorer.valuation(kept)
    assert scorer.folded
    n = len(kept)
    sliding = [(i, min(n, i + 5 + i % 17)) for i in range(0, n - 1, 2)]  # starts and ends move forward
    jumping = [(i, min(n, i + 1 + (i * 7) % 23)) for i in range(n - 1, 0, -3)]  # and not
    fresh = scorer.valuation(list(kept))  # the same valuation (memoized) ...
    assert fresh is v
    other = Scorer()
    other.folded.update(scorer.folded)
    w = other.valuation(kept)  # ... and a new one: nothing memoized yet
    assert w is not v
    for windows in (sliding, jumping):
        want = [plain_region(v, i, j) for i, j in windows]
        assert w.regions(windows) == want
        assert [v.region(i, j) for i, j in windows] == want
    assert [w.section(i) for i in range(n)] == [plain_region(v, i, i + 1) for i in range(n)]


def test_prepared_features_are_used_and_plans_unchanged(sympy: Trajectory) -> None:
    secs = [s for turn in sympy.turns[:40] for s in turn]
    scorer = Scorer()
    assert len(scorer.missing(secs)) == len(secs)
    left = scorer.prepare(secs, seconds=0.0)  # one at least, then the time is up
    assert left == len(secs) - 1
    assert scorer.prepare(secs) == 0 and scorer.missing(secs) == []
    assert scorer.scores(secs) == Scorer().scores(secs)


class LoopTurns:
    """Counts the event loop's turns from now until stop(): a task that yields once per turn."""

    def __init__(self) -> None:
        self.n = 0
        self._task = asyncio.create_task(self._count())

    async def _count(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.n += 1

    def stop(self) -> None:
        self._task.cancel()


async def test_features_are_prepared_a_slice_at_a_time_between_turns_of_the_loop(sympy: Trajectory) -> None:
    secs = [s for turn in sympy.turns[:20] for s in turn]
    state = Session("a", "s", b"peer", Watermarks(32000, 0.15, 0.6), ctx=Context(secs))
    turns = LoopTurns()
    await prepare_plan(state, slice_s=0.0)  # a slice: one section
    turns.stop()
    assert state.scorer.missing(secs) == []
    assert turns.n >= len(secs) - 2  # the loop ran between the slices
    assert state.scorer.scores(secs) == Scorer().scores(secs)


async def test_a_long_section_is_prepared_off_the_loop() -> None:
    """One tool output of 300 kB is more than any slice: its features are computed in a thread,
    and the loop turns meanwhile (on the loop, with nothing else to prepare, it would not)."""
    text = "\n".join(f"{i} Traceback at /srv/app/mod_{i % 50}.py:{i} in handler_{i % 9}" for i in range(6000))
    big = Section("big", "tool_result", text, tokens=len(text) // 4)
    small = Section("small", "user", "fix the failing test in mod_3", tokens=8)
    state = Session("a", "s", b"peer", Watermarks(200000, 0.15, 0.6), ctx=Context([small, big]))
    turns = LoopTurns()
    await asyncio.sleep(0)
    turns.n = 0
    await prepare_plan(state)
    turns.stop()
    assert state.scorer.missing([small, big]) == []
    assert turns.n >= 1
    assert state.scorer.scores([small, big]) == Scorer().scores([small, big])
