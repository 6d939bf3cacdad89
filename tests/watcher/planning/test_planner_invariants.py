"""Property-based invariants of watcher.planning.planner.plan (hypothesis, modest example counts)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipc.sections import Section
from watcher.planning.planner import (
    EARLY_SHARE,
    MIN_REGION_TOKENS,
    Plan,
    Watermarks,
    anchor_mask,
    digest_target,
    min_early_saving,
    oversize_limit,
    plan,
    should_plan,
    trigger_tokens,
)
from watcher.planning.relevance import RELEVANCE_METHODS
from watcher.planning.scoring import ScoreParams, Scorer

NAMES = ["parse_args", "load_config", "FooError", "BarWidget", "util.py", "core/models.py", "__eq__", "tmp_x"]
PLANNERS = ("optimistic", "recency")


@dataclass(frozen=True)
class Case:
    sections: list[Section]
    marks: Watermarks
    fresh: int


@st.composite
def texts(draw: st.DrawFn) -> str:
    words = draw(st.lists(st.sampled_from([*NAMES, "the", "value", "ok", "line"]), max_size=12))
    return " ".join(words)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    budget = draw(st.integers(2000, 40000))
    reserve = draw(st.sampled_from([0.1, 0.15, 0.2, 0.3]))
    low = draw(st.sampled_from([0.3, 0.45, 0.6]))
    marks = Watermarks(budget, reserve, min(low, 0.65 - reserve))
    big = max(50, budget // 8)
    secs: list[Section] = []
    if draw(st.booleans()):
        secs.append(
            Section(
                "sys",
                "system",
                "You are an agent.",
                tokens=draw(st.integers(10, 400)),
                priority="critical",
                pinned=True,
            )
        )
    secs.append(
        Section(
            "task", "user", "Fix " + draw(texts()), tokens=draw(st.integers(10, 400)), priority="critical"
        )
    )
    for t in range(draw(st.integers(0, 30))):
        extra = draw(st.sampled_from(["none", "none", "none", "digest", "pinned", "instruction", "low"]))
        if extra == "digest":
            secs.append(
                Section(f"d{t}", "digest", "[digest] " + draw(texts()), tokens=draw(st.integers(48, 600)))
            )
        elif extra == "pinned":
            secs.append(
                Section(
                    f"p{t}",
                    "user",
                    "decision: " + draw(texts()),
                    tokens=draw(st.integers(5, 200)),
                    pinned=True,
                )
            )
        elif extra == "instruction":
            secs.append(
                Section(
                    f"u{t}", "user", "now " + draw(texts()), tokens=draw(st.integers(5, 200)), priority="high"
                )
            )
        elif extra == "low":
            secs.append(
                Section(f"o{t}", "other", draw(texts()), tokens=draw(st.integers(5, 300)), priority="low")
            )
        g = f"g{t}"
        secs.append(Section(f"a{t}", "assistant", draw(texts()), tokens=draw(st.integers(5, 400)), group=g))
        if draw(st.booleans()):
            secs.append(
                Section(f"r{t}", "tool_result", draw(texts()), tokens=draw(st.integers(1, big)), group=g)
            )
    return Case(secs, marks, draw(st.integers(0, 5)))


def _total(c: Case) -> int:
    return sum(s.tokens for s in c.sections)


def _region(c: Case, p: Plan) -> tuple[int, int]:
    ids = [s.id for s in c.sections]
    i = ids.index(p.ids[0])
    assert ids[i : i + len(p.ids)] == list(p.ids), "a plan is one contiguous region"
    return i, i + len(p.ids)


def _saved(tokens: int, budget: int) -> int:
    return tokens - digest_target(tokens, budget)


def _runs(mask: list[bool]) -> list[tuple[int, int]]:
    out, start = [], None
    for i, a in enumerate([*mask, True]):
        if a and start is not None:
            out.append((start, i))
            start = None
        elif not a and start is None:
            start = i
    return out


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases(), st.sampled_from(PLANNERS))
def test_anchors_and_digests_are_never_replaced(c: Case, strategy: str) -> None:
    p = plan(c.sections, c.marks, c.fresh, strategy=strategy)
    if p is None:
        return
    mask = anchor_mask(c.sections, c.fresh, oversize_limit(c.marks))
    i, j = _region(c, p)
    assert not any(mask[i:j])
    for s in c.sections[i:j]:
        assert s.kind not in ("system", "digest"), "no digest of a digest, never the system prompt"
        assert not s.pinned and s.priority != "critical"
        assert not (s.kind == "user" and s.priority == "high"), "user instructions stay"


@SETTINGS
@given(cases(), st.sampled_from(PLANNERS), st.integers(0, 5000))
def test_no_plan_under_the_high_watermark(c: Case, strategy: str, growth: int) -> None:
    p = plan(c.sections, c.marks, c.fresh, strategy=strategy, growth=growth)
    if _total(c) + growth < c.marks.high or _total(c) <= trigger_tokens(c.marks, growth):
        assert p is None
    if _total(c) < c.marks.high:
        assert plan(c.sections, c.marks, c.fresh, strategy=strategy) is None
    assert should_plan(_total(c), c.marks, growth) == (_total(c) > trigger_tokens(c.marks, growth))


@SETTINGS
@given(cases(), st.sampled_from(PLANNERS))
def test_usage_reaches_the_low_watermark_when_foldable_tokens_allow_it(c: Case, strategy: str) -> None:
    total = _total(c)
    p = plan(c.sections, c.marks, c.fresh, strategy=strategy)
    need = total - c.marks.low
    mask = anchor_mask(c.sections, c.fresh, oversize_limit(c.marks))
    runs = [sum(s.tokens for s in c.sections[a:b]) for a, b in _runs(mask)]
    possible = any(_saved(t, c.marks.budget) >= need and t >= MIN_REGION_TOKENS for t in runs)
    if total >= c.marks.high and possible:
        assert p is not None
        assert total - p.tokens + p.target_tokens <= c.marks.low
    if p is not None:
        i, j = _region(c, p)
        assert p.tokens == sum(s.tokens for s in c.sections[i:j]) >= MIN_REGION_TOKENS
        saved = _saved(p.tokens, c.marks.budget)
        assert saved >= need or saved >= min_early_saving(c.marks) or total >= c.marks.high, "no sliver"
        assert p.target_tokens < p.tokens
        assert p.invalidated_prefix_tokens == total - sum(s.tokens for s in c.sections[:i])
        assert p.need == need
    early_plan = plan(c.sections, c.marks, c.fresh, strategy=strategy, growth=3000)
    if early_plan is not None and total < c.marks.high:  # look-ahead: a real region, not a sliver
        saved = _saved(early_plan.tokens, c.marks.budget)
        assert saved >= early_plan.need or saved >= min_early_saving(c.marks)
    if total >= c.marks.high:  # planned early (look-ahead): the expected growth is removed too
        early = plan(c.sections, c.marks, c.fresh, strategy=strategy, growth=1000)
        if early is not None:
            assert early.need == need + min(1000, int((c.marks.high - c.marks.low) * EARLY_SHARE))


@SETTINGS
@given(cases(), st.sampled_from(PLANNERS))
def test_no_overshoot_and_groups_stay_whole(c: Case, strategy: str) -> None:
    p = plan(c.sections, c.marks, c.fresh, strategy=strategy)
    if p is None:
        return
    i, j = _region(c, p)
    secs = c.sections
    assert not (i > 0 and secs[i].group and secs[i - 1].group == secs[i].group), "group split at the start"
    assert not (j < len(secs) and secs[j].group and secs[j - 1].group == secs[j].group), "split at the end"
    if _saved(p.tokens, c.marks.budget) >= p.need:
        # minimal: without its last group the region would not meet the need
        k = j - 1
        while k > i and secs[k].group and secs[k - 1].group == secs[k].group:
            k -= 1
        if k > i:
            shorter = sum(s.tokens for s in secs[i:k])
            assert _saved(shorter, c.marks.budget) < p.need or shorter < MIN_REGION_TOKENS


@SETTINGS
@given(cases(), st.sampled_from(PLANNERS))
def test_plans_are_deterministic(c: Case, strategy: str) -> None:
    shared = Scorer()
    first = plan(c.sections, c.marks, c.fresh, strategy=strategy, scorer=shared)
    assert plan(c.sections, c.marks, c.fresh, strategy=strategy, scorer=Scorer()) == first
    assert plan(list(c.sections), c.marks, c.fresh, strategy=strategy, scorer=shared) == first


@SETTINGS
@given(cases())
def test_recency_folds_the_oldest_region_that_meets_the_need(c: Case) -> None:
    p = plan(c.sections, c.marks, c.fresh, strategy="recency")
    o = plan(c.sections, c.marks, c.fresh, strategy="optimistic")
    assert (p is None) == (o is None), "both strategies share the trigger and the candidates"
    if p is None or o is None:
        return
    if _saved(p.tokens, c.marks.budget) >= p.need:
        assert _region(c, p)[0] <= _region(c, o)[0]


@SETTINGS
@given(cases(), st.sampled_from(PLANNERS), st.data())
@pytest.mark.slow
def test_a_group_with_a_pinned_or_oversized_member_is_never_split(
    c: Case, strategy: str, data: st.DataObject
) -> None:
    """An anchor inside a group (a pinned tool call) anchors its result too; an oversized fresh
    tool result takes its call along: a tool call and its result are never parted."""
    secs = [
        Section(s.id, s.kind, s.text, tokens=s.tokens, group=s.group, pinned=True)
        if s.kind == "assistant" and data.draw(st.integers(0, 3)) == 0
        else s
        for s in c.sections
    ]
    mask = anchor_mask(secs, c.fresh, oversize_limit(c.marks))
    for k in range(1, len(secs)):
        if secs[k].group and secs[k - 1].group == secs[k].group:
            assert mask[k] == mask[k - 1], f"group {secs[k].group} split by the anchors"
    p = plan(secs, c.marks, c.fresh, strategy=strategy)
    if p is not None:
        i, j = _region(Case(secs, c.marks, c.fresh), p)
        assert not (i > 0 and secs[i].group and secs[i - 1].group == secs[i].group)
        assert not (j < len(secs) and secs[j].group and secs[j - 1].group == secs[j].group)


@st.composite
def histories(draw: st.DrawFn) -> tuple[Case, list[tuple[str, int]]]:
    """A context and what happens to it between plans: sections arrive, plans are applied (the
    region replaced by a digest), sections are removed, or nothing changes."""
    steps = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["append", "append", "fold", "drop", "same", "prepare"]), st.integers(0, 40)
            ),
            max_size=8,
        )
    )
    return draw(cases()), steps


@SETTINGS
@given(histories(), st.sampled_from(PLANNERS), st.sampled_from(RELEVANCE_METHODS), st.data())
@pytest.mark.slow
def test_plans_with_a_warm_cache_equal_plans_from_scratch(
    h: tuple[Case, list[tuple[str, int]]], strategy: str, relevance: str, data: st.DataObject
) -> None:
    """A scorer that has seen earlier versions of the context (features cached, the last
    valuation kept, some sections prepared ahead) plans exactly as a fresh scorer that knows only
    what was folded before."""
    c, steps = h
    params = ScoreParams(relevance=relevance)
    warm = Scorer(params)
    secs = list(c.sections)
    for n, (what, arg) in enumerate([("same", 0), *steps]):
        if what == "append":
            for k in range(arg % 4 + 1):
                kind = data.draw(st.sampled_from(["assistant", "tool_result", "user", "other"]))
                secs.append(
                    Section(f"n{n}.{k}", kind, data.draw(texts()), tokens=data.draw(st.integers(1, 900)))
                )
        elif what == "drop" and secs:
            del secs[arg % len(secs)]
        elif what == "prepare":
            warm.prepare(secs, seconds=0.0)  # one section's features only
        elif what == "fold":
            p = plan(secs, c.marks, c.fresh, strategy=strategy, scorer=warm)
            if p is not None:
                i = [s.id for s in secs].index(p.ids[0])
                digest = Section(f"d.{n}", "digest", "[digest] " + " ".join(p.ids), tokens=p.target_tokens)
                secs[i : i + len(p.ids)] = [digest]
        got = plan(secs, c.marks, c.fresh, strategy=strategy, scorer=warm)
        scores = warm.scores(secs)  # (a plan that stops early has not looked at what left yet)
        fresh = Scorer(params)
        fresh.folded.update(warm.folded)
        assert plan(secs, c.marks, c.fresh, strategy=strategy, scorer=fresh) == got
        assert fresh.scores(secs) == scores
        assert warm.folded == fresh.folded
