"""Needed-fact retention on constructed replays: what the agent went back to, kept in view or not."""

from __future__ import annotations

from ipc.sections import Section
from watcher.eval.nfr import pooled, retention
from watcher.eval.scorecard import Run, aggregate


def sec(sid: str, kind: str, text: str) -> Section:
    return Section(id=sid, kind=kind, text=text, tokens=len(text) // 3 + 1)


TURNS = [
    [sec("s0", "user", "Fix the crash in the parser.")],
    [sec("s1", "tool_call", "pytest"), sec("s2", "tool_result", "no key in parse_header of http_utils.py")],
    [sec("s3", "assistant", "Reading the code."), sec("s4", "tool_result", "def render_page(): ...")],
    [sec("s5", "assistant", "The missing key comes from parse_header; http_utils.py needs a default.")],
    [sec("s6", "assistant", "Now render_page too.")],
]


def test_an_identifier_named_again_is_kept_only_if_a_digest_in_view_holds_it() -> None:
    removed = {"s2": 2, "s4": 3}  # s2 gone from call 2 on, s4 from call 3 on
    digest = "[digest] no key in parse_header (tool output s2; recall a1)"
    r = retention(TURNS, removed, {"d1": (digest, 2)})
    # needed: parse_header, http_utils, http_utils.py (s2, named in turn 3), render_page (s4, turn 4)
    assert (r.needed, r.kept) == (4, 1) and r.nfr == 1 / 4
    assert set(r.lost) == {"s2:http_utils", "s2:http_utils.py", "s4:render_page"}


def test_a_digest_replaced_before_the_call_does_not_count_and_originals_in_view_supersede() -> None:
    digest = "parse_header http_utils.py render_page"
    gone_too_early = retention(TURNS, {"s2": 2, "d1": 3}, {"d1": (digest, 2)})
    assert gone_too_early.needed == 3 and gone_too_early.kept == 3  # call 2 wrote turn 3: d1 in view
    late = retention(TURNS, {"s2": 2, "d1": 2}, {"d1": (digest, 2)})
    assert late.needed == 3 and late.kept == 0  # d1 was replaced before call 2
    twin = [*TURNS[:3], [sec("s4b", "tool_result", "parse_header http_utils.py"), *TURNS[3]], *TURNS[4:]]
    assert retention(twin, {"s2": 2}, {}).needed == 3  # s4b arrives with turn 3: not in view at call 2
    before = [*TURNS[:2], [*TURNS[2], sec("s4c", "tool_result", "parse_header http_utils.py")], *TURNS[3:]]
    assert retention(before, {"s2": 2}, {}).needed == 0  # another original in view holds both
    assert retention(TURNS, {}, {}).nfr is None


def test_runs_record_replacements_and_pool_nfr() -> None:
    a, b = Run("a", 1000, 0.1), Run("b", 1000, 0.1)
    a.nfr = retention(TURNS, {"s2": 2, "s4": 3}, {"d1": ("parse_header", 2)}).metrics()
    b.nfr = retention(TURNS, {"s2": 2}, {"d1": ("parse_header http_utils.py", 2)}).metrics()
    assert a.metrics()["needed_fact_retention"] == 0.25
    assert b.metrics()["needed_fact_retention"] == 1.0
    agg = aggregate([a, b])
    assert (agg["needed_facts"], agg["needed_facts_kept"]) == (7, 4)
    assert agg["needed_fact_retention"] == round(4 / 7, 4)
    assert pooled([])["needed_fact_retention"] is None
