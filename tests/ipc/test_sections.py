"""Long texts held deflated (ipc.sections.packed): a packed section reads, compares, copies and
pickles as the section it came from, and the sizes the daemon reads come without unpacking."""

from __future__ import annotations

import pickle
import random
import tracemalloc
from dataclasses import replace

import pytest

from ipc.sections import (
    PACK_MIN_CHARS,
    Section,
    held_size,
    is_packed,
    packed,
    text_bytes,
    text_key,
    text_len,
)

LOG = "".join(f"2026-11-28T21:{i % 60:02d}:00Z test_{i} PASSED [ {i % 100}%]\n" for i in range(400))
TEXTS = {
    "ascii log": LOG,
    "latin-1": LOG.replace("PASSED", "réussi"),  # a str of 1 byte per char, 2 in UTF-8
    "wide": LOG + "✓ done … 🎉\n",  # one emoji: the whole str takes 4 bytes per char
    "lone surrogate": LOG + "\ud800 from a bad decode\n",
}


@pytest.mark.parametrize("text", TEXTS.values(), ids=TEXTS.keys())
def test_a_packed_section_reads_compares_and_copies_as_the_original(text: str) -> None:
    orig = Section("t1", "tool_result", text, tokens=900, priority="low", group="g", ts=5.0, meta={"k": "v"})
    p = packed(orig)
    assert is_packed(p) and not is_packed(orig)
    assert p.text == text and p == orig and orig == p
    assert text_len(p) == len(text) == text_len(orig)
    assert text_bytes(p) == len(text.encode("utf-8", "surrogatepass")) == text_bytes(orig)
    assert pickle.loads(pickle.dumps(p)) == orig
    assert replace(p, tokens=1).text == text
    assert p.to_wire() == orig.to_wire()
    assert text_key(p) == text_key(orig) == hash(text)  # packed or not: the scorer's cache holds
    assert text_key(packed(replace(orig, text=text + "x"))) != text_key(p)
    assert held_size(p) * 2 < held_size(orig)


def test_it_holds_long_logs_in_a_fraction_of_the_memory() -> None:
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        texts = [LOG.replace("PASSED", f"PASSED{i}") for i in range(50)]  # 50 distinct logs
        as_str = tracemalloc.get_traced_memory()[0] - start
        secs = [packed(Section(f"t{i}", "tool_result", t)) for i, t in enumerate(texts)]
        del texts
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert all(map(is_packed, secs))
    assert held * 4 < as_str, (held, as_str)


def test_short_or_incompressible_texts_are_left_as_they_are() -> None:
    short = Section("s", "user", "x" * (PACK_MIN_CHARS - 1))
    assert packed(short) is short
    rng = random.Random(7)
    noise = Section("n", "tool_result", "".join(chr(0x4E00 + rng.randrange(20000)) for _ in range(4000)))
    assert packed(noise) is noise  # deflated UTF-8 of random CJK is larger than the str's 2 bytes a char


def test_a_packed_section_stays_frozen() -> None:
    p = packed(Section("t1", "tool_result", LOG))
    with pytest.raises(AttributeError):
        p.text = "changed"  # type: ignore[misc]
    assert p.text == LOG


class Accessor(str):
    """A str subclass as a text, as LangChain's ``message.text`` (TextAccessor) is."""


def test_a_text_that_subclasses_str_reads_and_packs_as_its_str() -> None:
    sec = Section("t1", "assistant", Accessor(LOG))
    assert text_len(sec) == len(LOG) and text_bytes(sec) == len(LOG) and sec.text == LOG
    p = packed(sec)
    assert is_packed(p) and p.text == LOG and type(p.text) is str
    short = Section("t2", "assistant", Accessor("ok"))
    assert packed(short) is short and short.text == "ok"
