"""The model's ranking inside a log's rendering (no model here: given scores): what structure keeps
is kept first, ranked lines fill what is left, whole and verbatim, and the count of what the model
added is exact."""

from __future__ import annotations

from summarizer.compress import Renderer, rankable
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
        raw = set(text.split("\n"))
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
