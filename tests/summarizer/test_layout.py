"""The digest's layout (summarizer.layout.render): how the key facts, the names line and the section
lines share a budget."""

from __future__ import annotations

import math

from summarizer.facts import extract_statements
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
    its share: the section lines (a line each, or renderings that fill the room they are given) take
    it neither before the names are picked nor by overshooting their own room."""
    for n in (6, 12, 20):
        items = _reads(n)
        names = ranked_names(items)
        source = "\n".join(i.text for i in items)
        for budget in range(1500, 8001, 250):
            facts = FactPicker(source, budget // 3, frozenset({"identifier"}))
            text, _ = render(items, Renderers("d1"), 9999, facts, (), budget, names)
            line = _names_line(text)
            missing = [x for x in names if x not in text]
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
