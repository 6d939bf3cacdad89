"""The model's ranking inside a log's rendering (no model here: given scores): what structure keeps
is kept first, ranked lines fill what is left, whole and verbatim, and the count of what the model
added is exact."""

from __future__ import annotations

from summarizer.compress import Renderer, rankable
from summarizer.compress.clean import stamp_free
from summarizer.items import Item
from summarizer.layout import Renderers
from summarizer.select import pick_lines


def _log() -> str:
    lines = [f"2026-01-01T00:00:{k % 60:02d}.0000000Z step {k}: compiling module_{k} ok" for k in range(300)]
    lines[120] = "2026-01-01T00:02:00.0000000Z warning: cache key 7f3a9c01 mismatched for vendor/zlib"
    lines += [
        "2026-01-01T00:05:00.0000000Z error[E0308]: mismatched types",
        "2026-01-01T00:05:00.0000000Z   --> src/lib.rs:10:5",
        "2026-01-01T00:05:01.0000000Z ##[error]Process completed with exit code 101.",
    ]
    return "\n".join(lines)


def test_ranked_lines_fill_after_the_failure_lines_whole_and_counted() -> None:
    text = _log()
    assert rankable(text) and not rankable("short")
    plain = Renderer(text, ref="a1#s1")
    ranked = Renderer(text, ref="a1#s1")
    cands = ranked.scorable()
    assert cands and all(line.strip() for _, line in cands)
    assert 120 in dict(cands)
    scores = {i: (9.0 if i == 120 else 1.0) for i, _ in cands}
    ranked.rank(scores)
    for cap in (600, 1200, 2400):
        det, mod = plain.render(max_chars=cap).text, ranked.render(max_chars=cap).text
        assert len(mod) <= cap
        for must in ("error[E0308]: mismatched types", "##[error]Process completed with exit code 101."):
            assert must in det and must in mod  # structure keeps what must never go
        raw = {stamp_free(ln) for ln in text.split("\n")}  # (shown without leading timestamps)
        shown = [ln for ln in mod.split("\n")[1:] if not ln.startswith("[")]
        assert all(ln.split(" [… ")[0] in raw or " (×" in ln for ln in shown)  # whole lines
        if cap >= 1200:
            assert "cache key 7f3a9c01 mismatched" in mod and "cache key 7f3a9c01" not in det
            assert ranked.model_lines >= 1
        assert plain.model_lines == 0
    ranked.rank({})
    assert ranked.render(max_chars=1200).text == plain.render(max_chars=1200).text


def test_pick_lines_shares_the_token_cap_and_keeps_line_order() -> None:
    a, b = Renderer(_log(), ref="a1#s1"), Renderer(_log(), ref="a1#s2")

    def count(text: str) -> int:
        return len(text) // 4 + 1

    picked = pick_lines([a, b], count, 200)
    used = sum(count(t) + 1 for mine in picked for _, t in mine)
    assert 150 < used <= 200 and all(mine for mine in picked)
    assert all([i for i, _ in mine] == sorted(i for i, _ in mine) for mine in picked)
    assert all(not t.startswith("2026-") for mine in picked for _, t in mine)  # timestamps dropped
    assert pick_lines([a, b], count, 0) == [[], []]


def _source() -> str:
    return "\n".join(f"def handler_{k}(request):\n    return respond(request, code={k})\n" for k in range(80))


def test_a_cut_section_shows_its_best_ranked_lines_instead_of_head_and_tail() -> None:
    """A file read cut to fit: its compressor's header stays, then the lines the model ranked
    highest, whole and verbatim in their order, each dropped run one omission marker; the lines the
    head and tail would not show are counted as the model's."""
    text = _source()
    plain, ranked = Renderer(text, ref="a1#s1"), Renderer(text, ref="a1#s1")
    assert plain.kind == "file" and plain.plan is None
    base = ranked.base().split("\n")
    cands = ranked.scorable()
    assert cands and 0 not in dict(cands)  # the header is not ranked: it is always shown
    assert {i for i, _ in cands[:8]} & set(range(len(base) // 2, len(base)))  # the sample spreads
    best = next(i for i, ln in cands if "handler_47(" in ln)
    ranked.rank({i: (9.0 if i == best else 1.0 / (1 + i)) for i, _ in cands})
    rules = plain.render(max_chars=400).text
    mod = ranked.render(max_chars=400).text
    assert plain.model_lines == 0 and plain.cut
    assert len(mod) <= 400 and mod.split("\n")[0] == base[0]
    assert "handler_47(" in mod and "handler_47(" not in rules
    shown = [ln for ln in mod.split("\n")[1:] if not ln.startswith("[… ")]
    assert shown and all(ln in base for ln in shown)  # whole lines of the rendering, in order
    assert [base.index(ln) for ln in shown] == sorted(base.index(ln) for ln in shown)
    assert ranked.model_lines == sum(1 for ln in shown if ln not in rules.split("\n")) >= 1
    assert ranked.ranked_lines == len(shown)
    assert ranked.render().text == plain.render().text  # shown whole: ranks change nothing
    # ranks that agree with the head: the rules' rendering, nothing counted as the model's
    head = Renderer(text, ref="a1#s1")
    in_rules = set(rules.split("\n"))
    head.rank({i: 1.0 for i, ln in cands if ln in in_rules})
    assert head.render(max_chars=400).text == rules and head.model_lines == 0


def test_prose_offers_its_lines_and_its_best_ranked_line() -> None:
    text = "I looked at the parser.\nThe bug is in parse_list in src/parse.py line 40.\n\nok\n"
    text += "Next I will run the tests."
    r = Renderer(text, ref="a1#s2")
    assert not r.active and r.best_line() is None
    cands = dict(r.scorable())
    assert set(cands) == {0, 1, 4}  # not the blank line, not a line of two letters
    r.rank({0: 2.0, 1: 7.5, 4: 3.0})
    assert r.best_line() == "The bug is in parse_list in src/parse.py line 40."


def _slice() -> str:
    """`cat -n` of a slice inside one C function: no outline, so the compressor shows its ends."""
    body = [f"    tok = next_token(p, {k}); if (tok == TK_NONE) continue;" for k in range(200)]
    body[117] = "    if (ast_id(ast) == TK_IFDEF && !sugar_ifdef(opt, ast)) return AST_ERROR;"
    lines = ["    static int counter = 0;", *body, "    return AST_OK;"]
    return "\n".join(f"{n:>6}\t{code}" for n, code in enumerate(lines, start=400))


def test_a_file_slice_shows_the_model_s_lines_in_the_room_of_its_ends() -> None:
    """A file read its compressor can only show the ends of (no outline): the model ranks all its
    lines, and the best ranked ones take the ends' room, whole and verbatim in their order; without
    ranks, or with ranks that agree with the ends, it is the compressor's rendering."""
    text = _slice()
    plain, ranked = Renderer(text, ref="a1#s3"), Renderer(text, ref="a1#s3")
    assert plain.kind == "file" and plain.slice is not None and len(plain.slice.lines) == 202
    rules = plain.render().text
    assert "TK_IFDEF" not in rules and "   400\t" in rules  # its ends
    cands = ranked.scorable()
    best = next(i for i, ln in cands if "TK_IFDEF" in ln)
    assert best == 118 and {i for i, _ in cands[:8]} & set(range(60, 140))  # the middle is offered
    ranked.rank({i: (9.0 if i == best else 1.0 / (1 + i)) for i, _ in cands})
    mod = ranked.render().text
    assert "TK_IFDEF" in mod and len(mod) <= len(rules) + 1
    assert mod.split("\n")[0] == rules.split("\n")[0]  # the compressor's header stays
    raw = text.split("\n")
    shown = [ln for ln in mod.split("\n")[1:] if not ln.startswith("[… ")]
    assert all(ln in raw for ln in shown)  # whole lines of the read, in their order
    assert [raw.index(ln) for ln in shown] == sorted(raw.index(ln) for ln in shown)
    ends = set(rules.split("\n"))
    assert ranked.model_lines == sum(1 for ln in shown if ln not in ends) >= 1
    assert ranked.best_line() is not None and "TK_IFDEF" in ranked.best_line()
    # cut to fit a digest: the model's lines still win over the ends' head and tail
    small = ranked.render(max_chars=300).text
    assert len(small) <= 300 and "TK_IFDEF" in small and ranked.model_lines >= 1
    assert plain.render(max_chars=300).text.count("TK_IFDEF") == 0 and plain.model_lines == 0
    # ranks that agree with the ends change nothing and count nothing
    agree = Renderer(text, ref="a1#s3")
    agree.rank({i: 1.0 for i, ln in cands if ln in ends})
    assert agree.render().text == rules and agree.model_lines == 0
    # an imports note stays first, as the compressor wrote it
    noted = Renderer('   399\t#include "ponyc.h"\n' + text, ref="a1#s3")
    assert noted.slice is not None and noted.slice.noted
    note = noted.render().text.split("\n")[1]
    assert note.startswith("imports (1, ") and "ponyc.h" in note
    noted.rank({i + 1: s for i, s in ranked.ranks.items()})
    assert noted.render().text.split("\n")[1] == note and "TK_IFDEF" in noted.render().text


def test_a_file_with_an_outline_is_no_slice() -> None:
    assert Renderer(_source(), ref="a1#s1").slice is None
    short = Renderer("\n".join(f"{n:>6}\tx = {n}  # " + "pad " * 25 for n in range(1, 16)), ref="a1#s1")
    assert short.active and short.kind == "file" and short.slice is None  # all its lines are shown


def test_what_an_agent_wrote_is_no_slice() -> None:
    """An agent's message that quotes code is detected as a file read too, but its first and last
    lines are its own words (the plan, the next command): only a tool's output is a slice."""
    text = _slice()
    assert Renderer(text, ref="a1#s3", tool_output=False).slice is None
    made = Renderers("a1")
    assert made.of(Item("s3", "assistant", text, 900)).slice is None
    assert made.of(Item("s4", "tool_result", text, 900)).slice is not None
