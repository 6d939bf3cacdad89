"""The code names of a region that its agent is likely to name again, for a digest's names line.

An agent goes back to what it read and wrote by name: a function it saw in a file it read, a class
in a traceback, a file it listed, a variable it mentioned in its own reasoning. A digest that shows
its sections only as short renderings (or only lists them) loses those names, and the agent then
either recalls the archive or guesses. The names line carries them verbatim and compactly.

A *name* is a word that can only be code: a file name with a known extension (``conftest.py``; a
path counts by its base name), a dunder (``__eq__``), snake_case or a leading underscore
(``_sympify``, ``collect_root``), CamelCase or mixedCase (``FSCollector``, ``getValue``; also
exception names). Plain words are not names; names every Python text holds (``__init__``,
``self``-like generics) are left out, and so are words that hold a generated id (seven or more hex
digits: a conda build string ``py311h1ddb823_0``) and files named by a UUID (a runner's
``af5455c7-a5c5-....sh``), which no agent types again.

Ranking (most likely to be named again first), each name counted once:

1. names the agent itself wrote in the region's prose (its reasoning, its commands): it uses its
   own vocabulary again;
2. names a tool output *defines* (``def x``, ``class X``, ``fn x``, ...): what a file read is about;
3. the other names of tool output.

A section is read as it is read for key facts (summarizer.facts.fact_source): without its colour
codes (a coloured `ESC[31mtest_x.py` is `test_x.py`, not `31mtest_x.py`), a tool's output wrapped
in JSON decoded (an escaped `\\ntest_x` is `test_x`), and, for a CI log, without its set-up (the
runner's and the checkout's settings: `defaultBranch`, `GITHUB_TOKEN`).

Within a tier, names of the region's latest sections come first (an agent goes on from its most
recent work: the file it read last, the script it wrote last), then those found in more sections (a
name seen in several places is what the region is about), then the rarer in text (a name repeated
on every line of one log is noise), then the first occurrence. Work is bounded like the fact
extraction: long texts are read in their head and tail only, and at most MAX_NAMES names are ranked.

The layout (summarizer.layout.render) reserves the line its share of the digest, taken from the
extracted key facts even when the section lines overshoot their room. As a backstop (stated facts
and section lines that alone fill the budget), the line still gets at least NAMES_FLOOR of the size
of the rest of the digest: names are the densest carriers of what an agent names again, and the
digest's size search (summarizer.digest) makes the whole digest fit its target.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from summarizer.facts import FAMILY_MAX, big_families, fact_source, number_shape
from summarizer.items import Item
from summarizer.safety import redact

PROSE: Final = frozenset({"assistant", "user", "system", "other"})
AGENT_WORDS: Final = PROSE | {"tool_call"}  # prose and the agent's own commands: tier 0
NAMES_FLOOR: Final = 0.05
MAX_NAMES: Final = 400
MAX_NAME_CHARS: Final = 60
_HEAD, _TAIL = 64_000, 32_000

_EXT = (
    "py|pyi|pyx|js|mjs|ts|tsx|jsx|java|kt|c|h|cc|cpp|hpp|go|rs|rb|php|cs|swift|scala|pony|md|rst|txt|json|"
    "jsonl|yaml|yml|toml|cfg|ini|sh|html|css|sql|xml|lock|conf|log|csv|ipynb|gradle|mk"
)
# one token: a word, optionally dotted/hyphenated (file names); looked at once per distinct token
_TOKEN = re.compile(r"[A-Za-z_][\w\-]{0,79}(?:\.[\w\-]{1,40}){0,4}")
_FILE = re.compile(rf"[\w\-]+\.(?:{_EXT})$")
_HUMP = re.compile(r"[a-z0-9][A-Z]|[A-Z]{2,}[a-z]")
# a generated id inside a word: seven or more hex digits, digits and letters both (a conda build
# string `py311h1ddb823_0`, a hashed constraint name `account_id_7de0ae37_fk`); a file named by a UUID
# (a runner's temporary script). A file named by a revision id (Alembic's `c3a8f1b2d4e6_add_users.py`)
# stays a name: an agent lists, reads and edits such files.
_HEX_ID = re.compile(r"(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_DEFINES = re.compile(
    r"\b(?:def|class|func|function|fn|interface|struct|enum|trait|impl|type|actor|primitive|fun|"
    r"module|macro)[ \t]+([A-Za-z_]\w{0,59})"
)
GENERIC: Final = frozenset(
    {"__init__", "__name__", "__main__", "__file__", "__class__", "__dict__", "__doc__", "__init__.py",
     "__main__.py", "setup.py", "returncode", "NoneType"}
)  # fmt: skip


def _window(text: str) -> str:
    return text if len(text) <= _HEAD + _TAIL else text[:_HEAD] + "\n" + text[-_TAIL:]


def _is_name(word: str) -> bool:
    inner = word.strip("_")
    if not inner or not any(c.isalpha() for c in inner) or len(word) > MAX_NAME_CHARS:
        return False
    if _HEX_ID.search(word):
        return False
    return "_" in word or _HUMP.search(word) is not None


def _names_of(text: str) -> dict[str, int]:
    """The names of `text` (see the module docstring) and how often each occurs, in first-seen order."""
    out: dict[str, int] = {}
    for raw in _TOKEN.findall(text):  # (a path's segments are separate tokens: "/" ends one)
        token = raw.rstrip(".-")
        if _FILE.fullmatch(token):
            if not _UUID.match(token):
                out[token] = out.get(token, 0) + 1
            continue
        parts = token.split(".")  # dotted code: each part is looked at
        for part in parts:
            if _is_name(part):
                out[part] = out.get(part, 0) + 1
    return out


@dataclass(frozen=True)
class _Seen:
    tier: int  # 0 = the agent's prose, 1 = defined in tool output, 2 = other tool output
    sections: int  # number of sections naming it
    count: int  # occurrences in all
    first: int  # order of first occurrence
    last: int  # index of the last section naming it


def ranked_names(items: Sequence[Item]) -> tuple[str, ...]:
    """The region's names, most likely to be named again first (module docstring); at most MAX_NAMES."""
    seen: dict[str, _Seen] = {}
    for idx, it in enumerate(items):
        if it.kind == "digest":
            continue  # an earlier digest is kept verbatim: its names are already in view
        # names on instruction-like lines stay in the archive only; colour codes are no part of a
        # name; a CI log's set-up (the runner's, git's and the tools' settings) is no source of names
        text = redact(fact_source(_window(it.text)))
        defined = set(_DEFINES.findall(text)) if it.kind not in AGENT_WORDS else set()
        for name, n in _names_of(text).items():
            if name in GENERIC:
                continue
            tier = 0 if it.kind in AGENT_WORDS else 1 if name in defined else 2
            old = seen.get(name)
            if old is None:
                seen[name] = _Seen(tier, 1, n, len(seen), idx)
            else:
                seen[name] = _Seen(min(tier, old.tier), old.sections + 1, old.count + n, old.first, idx)
    order = sorted(
        seen, key=lambda x: (seen[x].tier, -seen[x].last, -seen[x].sections, seen[x].count, seen[x].first)
    )
    return tuple(order[:MAX_NAMES])


def pick_names(names: Sequence[str], present: str, max_chars: int) -> list[str]:
    """Names of `names` (ranked) not already verbatim in `present`, whose space-separated line fits
    `max_chars`, or NAMES_FLOOR of the size of `present` (the rest of the digest) if that is more;
    output in rank order. A name contained in a chosen one is carried by it. Of a big family of
    names that differ only in their numbers (summarizer.facts.big_families: 400 generated tests
    `adds_000` ... `adds_399`), FAMILY_MAX go, counting those shown elsewhere in the digest: the
    rest would fill the line with one thing said again."""
    max_chars = max(max_chars, int(NAMES_FLOOR * len(present)))
    chosen: list[str] = []
    family: Counter[str] = Counter()
    big = big_families(names)
    size = 0
    for name in names:
        if size + len(name) + 1 > max_chars:
            continue  # a shorter one further down may still fit
        shape = number_shape(name)
        if name in present or any(name in c for c in chosen):
            family[shape] += 1  # a family shown elsewhere in the digest is shown
            continue
        if shape in big and family[shape] >= FAMILY_MAX:
            continue  # adds_017 after adds_000 and adds_001: the room goes to other names
        family[shape] += 1
        chosen.append(name)
        size += len(name) + 1
    return chosen
