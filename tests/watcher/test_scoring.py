"""Scoring, density and relevance, on sections of the real trajectories."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from ipc.sections import Section
from summarizer.digest import approx_tokens
from watcher.config import RELEVANCE_METHODS as CONFIG_METHODS
from watcher.config import CompactionConfig
from watcher.identifiers import identifiers, terms
from watcher.relevance import RELEVANCE_METHODS, MentionModel, goal_indices
from watcher.scoring import ScoreParams, Scorer, features, score_params, turn_ages
from watcher.trajectories import Trajectory, load


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
    from watcher.relevance import mentions

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
