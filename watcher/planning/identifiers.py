"""Identifiers and terms of a section's text: what the planner scores and what regret measures.

*Identifiers* are the names an agent refers back to: file names (``basic.py``; a path counts by its
base name, so ``/testbed/sympy/core/basic.py`` and ``core/basic.py`` match), code names in
snake_case, dunder or CamelCase/mixedCase form (``_sympify``, ``__eq__``, ``SympifyError``,
``getValue``), which also covers exception names in error strings. Plain words are not
identifiers. *Terms* are all lower-cased words of three or more characters: the vocabulary of the
BM25 relevance variant.

Work is bounded: texts longer than ``WINDOW_HEAD + WINDOW_TAIL`` characters are read only in their
head and tail (a 2 MB log costs about as much as a 256 kB one). The names are interned: the scorer
keeps every section's identifiers while it is in the context, and one name held by many sections is
then one string (on the load bench, 1.65 -> 0.8 bytes of features per byte of mirrored text).
"""

from __future__ import annotations

import re
import sys
from typing import Final

from summarizer.compress.clean import uncoloured
from summarizer.compress.jsondoc import decoded_payloads
from summarizer.compress.markup import page_text
from summarizer.detect import is_page

WINDOW_HEAD: Final = 192_000
WINDOW_TAIL: Final = 64_000
MAX_IDENTIFIER_CHARS: Final = 80

_EXTENSIONS = (
    "py|pyi|pyx|js|mjs|ts|tsx|jsx|java|kt|c|h|cc|cpp|hpp|go|rs|rb|php|cs|swift|scala|pony|md|rst|txt|json|"
    "jsonl|yaml|yml|toml|cfg|ini|sh|html|css|sql|xml|lock|conf|log|csv|ipynb|gradle|mk"
)
_RUN = re.compile(r"[\w.\-]+")  # maximal runs: one pass, no backtracking over long words
_FILE = re.compile(rf"[\w\-]+\.(?:{_EXTENSIONS})(?![\w])")
MAX_FILE_RUN = 300  # a run longer than this is not a file name (base64, a long word): skipped
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,79}")
_CAMEL = re.compile(r"[A-Z]?[a-z0-9]+[A-Z]|[A-Z]{2,}[a-z]")  # a hump after a lower-case run
_TERM = re.compile(r"[a-z0-9_]{3,40}")

# Names every Python-ish text mentions; matching on them says nothing about a specific section.
GENERIC: Final = frozenset(
    {
        "__init__",
        "__name__",
        "__main__",
        "__file__",
        "__class__",
        "__dict__",
        "__doc__",
        "__init__.py",
        "__main__.py",
        "setup.py",
        "returncode",
        "NoneType",
    }
)

_STOP_TEXT: Final = (
    "the and for that this with from are was were not but have has had you your can will would "
    "should could into out then than there their them they what when where which who how all any "
    "one two its it's let now see use used using also just like need get got make run output "
    "returncode thought bash file line lines def self return true false none"
)
_STOP_TERMS: Final = frozenset(_STOP_TEXT.split())


def window(text: str) -> str:
    """The part of `text` that is read (its head and tail), without colour codes: a coloured
    `ESC[1mtest_x.py` names `test_x.py` (summarizer.compress.clean.uncoloured). A tool's output
    wrapped in JSON that is read whole is read decoded (summarizer.compress.jsondoc): an escaped
    `\\ntest_x` names `test_x`, not `ntest_x`. An HTML page is read as its text
    (summarizer.compress.markup): its tags' classes and ids name nothing the agent works on."""
    if is_page(text):
        return page_text(text[: WINDOW_HEAD + WINDOW_TAIL])
    if len(text) > WINDOW_HEAD + WINDOW_TAIL:
        text = text[:WINDOW_HEAD] + "\n" + text[-WINDOW_TAIL:]
    else:
        text = "\n".join(decoded_payloads(text)) or text
    return uncoloured(text)


def _is_code_name(word: str) -> bool:
    inner = word.strip("_")
    if not inner or not any(c.isalpha() for c in inner):
        return False
    if word.startswith("__") and word.endswith("__"):
        return True  # dunder
    if "_" in word:
        return True  # snake_case or _private
    return _CAMEL.search(word) is not None  # CamelCase / mixedCase


def identifiers(text: str) -> frozenset[str]:
    """The identifiers of ``text`` (see the module docstring), generic ones left out.

    Each distinct run and word is looked at once, in order of first occurrence (so the set is
    built in the same order as by a plain scan: its iteration order, which the scores' float
    products follow, does not depend on this shortcut). A word without an underscore or an
    upper-case letter cannot be a code name: skipped without a regex."""
    text = window(text)
    out: set[str] = set()
    for run in dict.fromkeys(_RUN.findall(text)):
        if "." in run and len(run) <= MAX_FILE_RUN:
            out.update(map(sys.intern, _FILE.findall(run)))
    for w in dict.fromkeys(_WORD.findall(text)):
        if "_" not in w and w.islower():
            continue  # plain lower-case word (digits allowed): neither dunder, snake nor camel
        if _is_code_name(w):
            out.add(sys.intern(w))
    return frozenset(out - GENERIC)


def terms(text: str) -> list[str]:
    """Lower-cased words of 3-40 characters (stop words left out), in order, for BM25."""
    return [t for t in _TERM.findall(window(text).lower()) if t not in _STOP_TERMS]
