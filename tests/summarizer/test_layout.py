"""The digest's layout (summarizer.layout.render): how the key facts, the names line and the section
lines share a budget."""

from __future__ import annotations

import math

from summarizer.facts import big_families, extract_statements, number_shape
from summarizer.items import Item
from summarizer.layout import (
    NAMES_LABEL,
    NAMES_RAMP,
    NAMES_SHARE,
    NAMES_SHARE_LARGE,
    STATEMENT_SHARE,
    FactPicker,
    Renderers,
    names_share,
    render,
)
from summarizer.names import ranked_names
from tests.summarizer.test_names import _file_read


def _reads(n: int) -> list[Item]:
    """An agent reading `n` modules, one command and one `cat -n` each: many names, no statements."""
    items: list[Item] = []
    for k in range(n):
        cmd = f"THOUGHT: next, `step_{k}_handler` in src/mod_{k}.py and `merge_state_{k}`\n\n"
        cmd += f"```bash\ncat src/mod_{k}.py\n```"
        read = _file_read(f"src/mod_{k}.py", 10, 2, 7 * k)
        items += [Item(f"s{2 * k:05d}", "assistant", cmd, len(cmd) // 3)]
        items += [Item(f"s{2 * k + 1:05d}", "tool_result", read, len(read) // 3)]
    return items


def _names_line(text: str) -> str:
    return next((ln for ln in text.split("\n") if ln.startswith(NAMES_LABEL)), "")


def test_the_names_line_keeps_its_share_whatever_the_section_lines_take() -> None:
    """At every budget, a name of the region is left out of the digest only when the names line has
    its share (or it is of a big family of numbered names, summarizer.facts.big_families): the
    section lines (a line each, or renderings that fill the room they are given) take it neither
    before the names are picked nor by overshooting their own room."""
    for n in (6, 12, 20):
        items = _reads(n)
        names = ranked_names(items)
        big = big_families(names)  # step_1_handler ... step_19_handler: two of them (pick_names)
        source = "\n".join(i.text for i in items)
        for budget in range(1500, 8001, 250):
            facts = FactPicker(source, budget // 3, frozenset({"identifier"}))
            text, _ = render(items, Renderers("d1"), 9999, facts, (), budget, names)
            line = _names_line(text)
            missing = [x for x in names if x not in text and number_shape(x) not in big]
            longest = max(len(x) + 1 for x in names)
            assert not missing or len(line) >= names_share(budget) * budget - longest, (n, budget, len(line))
            assert len(text) <= budget, (n, budget, len(text))  # the overshoot came out of the facts
            assert all(x in source for x in line.removeprefix(NAMES_LABEL).split())


def test_the_names_share_grows_from_small_to_larger_digests() -> None:
    lo, hi = NAMES_RAMP
    assert names_share(500) == names_share(lo) == NAMES_SHARE
    assert names_share(hi) == names_share(20_000) == NAMES_SHARE_LARGE
    shares = [names_share(b) for b in range(lo, hi + 1, 100)]
    assert shares == sorted(shares) and NAMES_SHARE < names_share((lo + hi) // 2) < NAMES_SHARE_LARGE


def test_a_stated_fact_fits_its_share_without_the_lines_label() -> None:
    """The stated facts' share is for the sentences: the key-facts label (counted once for the whole
    line) does not crowd a sentence out of a small digest whose failure lines cap the key facts."""
    said = "We decided to keep the legacy flag --umbra-compat-7 until the 3.14 release."
    source = f"some output\n{said}\nmore output\n"
    assert extract_statements(source) == [said]
    max_chars = math.ceil((len(said) + 3) / STATEMENT_SHARE)  # exactly its share, the label aside
    # (all the room reserved: no extracted facts, only the stated facts' share)
    assert FactPicker(source, 400).pick(max_chars, "", reserved=max_chars) == [said]
    assert FactPicker(source, 400).pick(max_chars - 20, "", reserved=max_chars) == []  # the share binds


def test_a_sentence_too_long_for_the_room_leaves_its_url_and_path() -> None:
    """A stated decision that does not fit a small digest's key facts: its path and URL (facts of
    their own, which the sentence carried while it fitted) are carried instead of lost with it."""
    url, path = "https://ci.example.org/runs/15626", "/srv/ledger/retry_4471.toml"
    said = f"The fix is to set `ledger_retry_limit` to 17177, as described in {url} for {path}."
    source = f"some output\n{said}\nmore output\n"
    assert FactPicker(source, 400).pick(400, "") == [said]  # room for the sentence: the parts echo it
    small = FactPicker(source, 400).pick(160, "")
    assert said not in small and path in small and url in small
    assert FactPicker(source, 400).pick(160, f"shown: {url}") == [path]  # not what the digest shows


def test_a_listed_region_shows_the_sections_whose_lines_the_model_ranked_highest() -> None:
    """A region too large for a line per section is only listed by the rules. With the model's ranks,
    the sections whose best-ranked line ranks highest show that line (verbatim, a brief each), as many
    as the room holds beside the list of the others, in the region's order; each counts as the
    model's (the rules show none). Without ranks the listing is the rules', byte for byte."""
    from summarizer.frame import unquoted

    items = _reads(20)
    source = "\n".join(i.text for i in items)
    budget = 1500
    facts = FactPicker(source, budget // 3)
    rules, _ = render(items, Renderers("d1"), 9999, facts, (), budget)
    assert "- all 40 not shown (20 assistant, 20 tool_result); recall d1#ID for one, d1 for all" in rules
    ranked = Renderers("d1")
    favourites = {"s00013": 9.0, "s00031": 8.0, "s00004": 7.5}  # one line of each ranks highest
    for it in items:
        r = ranked.of(it)
        cands = r.scorable()
        top = favourites.get(it.id, 1.0)
        r.rank({i: (top if k == len(cands) // 2 else 0.5) for k, (i, _) in enumerate(cands)})
    text, _ = render(items, ranked, 9999, facts, (), budget)
    assert len(text) <= budget and unquoted(text, items) == []
    shown = [ln for ln in text.split("\n") if ln.startswith("- s")]
    ids = [ln.split()[1] for ln in shown]
    assert ids == sorted(ids) and set(favourites) <= set(ids)  # the best-ranked first, in region order
    ties = sorted(set(ids) - set(favourites))  # then those ranked 1.0, earliest first, while room lasts
    assert ties == [it.id for it in items if it.id not in favourites][: len(ties)] and len(ids) < 40
    for ln in shown:
        it = next(i for i in items if i.id == ln.split()[1])
        best = ranked.of(it).ranked()
        assert best and best[0][1].strip()[:20] in ln
    assert f"- the other {40 - len(shown)} not shown (" in text
    assert ranked.model_lines == len(shown) == ranked.ranked_lines
    again, _ = render(items, Renderers("d1"), 9999, facts, (), budget)
    assert again == rules


def test_a_listed_sections_line_is_a_quote_of_its_text_not_of_its_rendering() -> None:
    """A message holding code is rendered as a file read, its lines numbered by the compressor
    ("numbered here"): the line the model ranked highest is shown without that number, as the
    message has it; a compressor's own line (not in the text) is never shown as a quote."""
    from summarizer.frame import unquoted

    code = "\n".join(
        f"class Checker{k}(OptionsProviderMixIn):\n    name = 'checker_{k}'\n    def open(self):\n"
        f"        return self.linter.config.jobs_{k}\n"
        for k in range(14)
    )
    items = [*_reads(20), Item("s99999", "assistant", code, len(code) // 3)]
    ranked = Renderers("d1")
    r = ranked.of(items[-1])
    numbered = next(i for i, ln in r.scorable() if "Checker13(" in ln)
    assert r.base().split("\n")[numbered].strip().split("\t")[0].isdigit()  # numbered in the rendering
    r.rank({numbered: 9.0, 0: 12.0})  # line 0 is the compressor's header: not in the text
    facts = FactPicker("\n".join(i.text for i in items), 500)
    text, _ = render(items, ranked, 9999, facts, (), 1500)
    assert unquoted(text, items) == []
    shown = [ln for ln in text.split("\n") if ln.startswith("- s99999 ")]
    assert shown and shown[0].startswith("- s99999 assistant: class Checker13(OptionsProviderMixIn):"), shown
