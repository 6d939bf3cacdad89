"""Deterministic extraction of key facts to carry verbatim in every digest.

Facts are short strings found in the text: error messages, stated decisions, file paths, code
identifiers, meaningful numbers (versions, issue numbers, exit codes, counts) and URLs.

Work is bounded so a 900k-character tool output costs a few tens of milliseconds: errors, issue
numbers, exit codes and URLs are searched in the whole text with literal-anchored patterns; the
costlier categories only in its first 64k and last 32k characters. Every pattern uses bounded
quantifiers, so none can backtrack catastrophically.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from summarizer.compress.classify import (
    ADVICE,
    HOUSEKEEPING_WORDS,
    housekeeping,
    is_failure,
    setup_lines,
    step_spans,
)
from summarizer.compress.clean import stamp_free, uncoloured
from summarizer.compress.jsondoc import decoded_payloads
from summarizer.compress.markup import page_text
from summarizer.detect import is_page, split_envelope
from summarizer.textscan import line_starts, lines_with

FACT_MAX_CHARS = 200
FAMILY_BIG, FAMILY_MAX = 6, 2  # of a family bigger than FAMILY_BIG (big_families), FAMILY_MAX are shown
_SENTENCE_REACH = 240  # how far a sentence may extend either side of its marker word
_WINDOW_HEAD = 64_000
_WINDOW_TAIL = 32_000
_ADVICE_LINES = re.compile(f"^(?:{ADVICE.pattern}).*$", re.M)
_ADVICE_PREFIXES = ("[ERROR]", "[FATAL]", "npm ERR!", "npm error")  # ADVICE's: what a line of it starts with


@dataclass(frozen=True, order=True)
class _Found:
    rank: int  # 0 = strong evidence, higher = weaker; strong ones are chosen first
    pos: int  # offset of the occurrence, for output order
    text: str


def fact_source(text: str) -> str:
    """A section's text as a source of key facts: a CI log without its set-up (compress.classify's
    setup_lines: the runner's and the tools' versions, the checkout's paths and refs, no fact about
    the failure) and its housekeeping (compress.classify's housekeeping: a step's `shell:` line,
    what post-job steps print), those lines left empty so that every fact is still a quote of one
    line. The set-up stays in the log's rendering, in its lowest tiers. A tool output's envelope
    (`<returncode>`) is not the log's: it stays a source. Colour codes go first
    (compress.clean.uncoloured); a tool's output wrapped in JSON is read decoded, its text payloads
    one after the other (compress.jsondoc); an HTML page as its text (compress.markup), not its tags
    and attributes."""
    env = split_envelope(text)
    if is_page(env.body):
        return env.prefix + page_text(env.body) + env.suffix
    text = uncoloured("\n".join(decoded_payloads(env.body)) or text)
    if any(p in text for p in _ADVICE_PREFIXES):  # a runner's advice is no source: its paths, help URLs
        text = _ADVICE_LINES.sub("", text)
    if "##[group]Run " not in text:
        return text
    raw = text.split("\n")
    prefix = split_envelope(text).prefix
    skip = prefix.count("\n") + (1 if prefix and not prefix.endswith("\n") else 0)
    # (only step headers and error annotations are read: the other lines need no stamp removed)
    clean = [stamp_free(ln) if "##[" in ln or "::error" in ln else ln for ln in raw[skip:]]
    setup = {skip + i for i in setup_lines(clean, step_spans(clean))}
    # a runner's housekeeping (a step's `shell: /usr/bin/bash -e {0}`, the post-job steps' output:
    # its git commands, the credentials' paths): in every job, no fact about the failure
    joined = "\n".join(clean)  # (stamps hold none of the words: the same lines hold them without)
    hits = lines_with(joined, HOUSEKEEPING_WORDS, line_starts(clean))
    post = min((i for i in hits if "Post job cleanup." in clean[i]), default=len(clean))
    for i in hits.union(range(post, len(clean))):
        clean[i] = stamp_free(clean[i])
    setup.update(skip + i for i in housekeeping(clean, hits, lambda i: is_failure(clean[i])))
    return "\n".join("" if i in setup else ln for i, ln in enumerate(raw)) if setup else text


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= FACT_MAX_CHARS else text[: FACT_MAX_CHARS - 1] + "…"


def _line_at(text: str, pos: int) -> tuple[int, str]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return start, text[start : end if end >= 0 else len(text)]


def _word_start(text: str, pos: int) -> bool:
    return pos == 0 or not (text[pos - 1].isalnum() or text[pos - 1] in "_.&#")


def _word_end(text: str, pos: int) -> bool:
    return pos >= len(text) or not (text[pos].isalnum() or text[pos] == "_")


# --------------------------------------------------------------------------------------------- errors

_ERROR_HINT = re.compile(r"Error|Exception|error|ERROR|FAIL|fatal|FATAL")
_EXCEPTION_LINE = re.compile(r"(?:[A-Za-z_]\w{0,60}\.){0,6}[A-Z]\w{0,60}(?:Error|Exception)\b(?::.*)?")
_ERROR_PREFIX = re.compile(
    r"(?:\[(?:ERROR|FATAL)\]|error|Error|ERROR|fatal|FATAL|FAILED|FAIL)(?::|[ \t])[ \t]*\S.*"
)
_PYTEST_E = re.compile(r"E[ \t]+")


def _error_fact(line: str) -> tuple[int, str] | None:
    """(rank, message) if the line reports an error: exception lines and "Error: ..." lines first (a
    log's leading timestamps are not part of the message)."""
    s = stamp_free(line.strip())
    if m := _PYTEST_E.match(s):
        s = s[m.end() :]
    if len(s) > 2000:
        s = s[:2000]
    if ADVICE.match(s):
        return None  # "[ERROR] Re-run Maven using the -X switch": no fact of the failure
    if _EXCEPTION_LINE.fullmatch(s) or _ERROR_PREFIX.fullmatch(s):
        return 0, s
    if "error: " in s or "fatal: " in s:
        return 1, s
    return None


def _errors(text: str, cap: int) -> Iterator[_Found]:
    """Error lines, each line looked at once (the search resumes after the line of each hint)."""
    pos, n, lines = 0, 0, 0
    while n < cap and lines < 50 * cap and (m := _ERROR_HINT.search(text, pos)):
        start, line = _line_at(text, m.start())
        pos = start + len(line) + 1
        lines += 1
        if (fact := _error_fact(line)) is not None:
            n += 1
            yield _Found(fact[0], start, fact[1])


# ------------------------------------------------------------------------------------------ decisions

_STRONG_DECISION = re.compile(
    r"decided|Decided|we will|We will|we'll|We'll|must|should not|Should not|shouldn't|the fix is|The fix is|"
    r"the fix was|The fix was|root cause|Root cause|we need to|We need to"
)
_WEAK_DECISION = re.compile(r"I will|I'll|let's|Let's|let us|Let us|I am going to|I'm going to")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’,;:-]*")
_LOGGY = re.compile(r"\d\d:\d\d:\d\d|\b(?:DEBUG|INFO|TRACE)\b|^\[")
_CODE_START = ("raise ", "return ", "assert ", "print(", "def ", "class ", "import ", "from ", "if ", "elif ")


def _sentence(text: str, start: int, end: int) -> str:
    """The sentence around text[start:end]: from the previous sentence end to the next one."""
    lo = max(0, start - _SENTENCE_REACH)
    left = lo
    for sep in ("\n", ". ", "? ", "! "):
        i = text.rfind(sep, lo, start)
        if i >= 0:
            left = max(left, i + len(sep))
    hi = min(len(text), end + _SENTENCE_REACH)
    m = _SENTENCE_END.search(text, end, hi)
    right = hi if m is None else m.start() if m[0] == "\n" else m.end()
    return text[left:right].strip().lstrip("#/*-+> ").strip()


def _is_prose(sentence: str) -> bool:
    if _LOGGY.search(sentence) or sentence.startswith(_CODE_START) or "('" in sentence or '("' in sentence:
        return False
    tokens = sentence.split()
    if len(tokens) < 4:
        return False
    return sum(1 for t in tokens if _WORD.fullmatch(t.strip(".!?\"'`()"))) >= 0.6 * len(tokens)


# A token that pins a statement down: a number of 3+ digits, a name with a digit, _ or an inner
# hyphen, a path or URL, an issue reference, a flag.
_SPECIFIC = re.compile(r"\d{3,}|\b[A-Za-z]+\d\w*|\b\w+_\w+|\b[a-z]+-[a-z0-9]+\b|\S/\S|#\d+|--\w")
_STATEMENT_WORDS = (5, 40)
# An agent thinking aloud ("Maybe it is registered in main.py.", "Wait, x IS a hook.") is not a
# stated fact: such lines rank after every plain statement (they would crowd real facts out).
_MUSING = re.compile(
    r"(?:thought:\s*)?(?:maybe|perhaps|possibly|probably|wait|hmm*|ah|oh|ok(?:ay)?|so|but|now|then|next"
    r"|first|no|yes|let'?s|let me|i think|i guess|i wonder|i assume|i suspect|i'll|i will|i need|i should"
    r"|it seems|if)\b",
    re.I,
)


def _statements(text: str, cap: int) -> Iterator[_Found]:
    """Stated facts: a prose line of its own, one or two sentences, that names something specific
    ("The staging database listens on port 54329."). Rare in tool output, short in prose."""
    n, pos = 0, 0
    for line in text.splitlines(keepends=True):
        start, pos = pos, pos + len(line)
        body = line.strip()
        if not body or not body[0].isupper() or body[-1] not in ".!" or body.count(". ") > 1 or "?" in body:
            continue  # (a line that asks something is not a statement)
        words = len(body.split())
        if _STATEMENT_WORDS[0] <= words <= _STATEMENT_WORDS[1] and _SPECIFIC.search(body) and _is_prose(body):
            n += 1
            yield _Found(2 if _MUSING.match(body) else 1, start, body)
            if n >= cap:
                return


def extract_statements(text: str, limit: int = 200) -> list[str]:
    """Stated facts of `text` (:func:`_statements`), those naming something the text mentions
    nowhere else first (the digest is the only place it would survive), then the rest; in text
    order within a rank. An agent's musings (:data:`_MUSING`) are not stated facts: the code names
    they mention are carried, more compactly, by the digest's names line (summarizer.names)."""
    found: list[tuple[int, int, str]] = []
    for f in _statements(text, limit):
        if _MUSING.match(f.text):
            continue
        unique = any(text.count(m[0]) == 1 for m in _SPECIFIC.finditer(f.text))
        found.append((0 if unique else 1, f.pos, _clip(f.text)))
    seen: set[str] = set()
    out = []
    for *_, fact in sorted(found):
        if fact not in seen:
            seen.add(fact)
            out.append(fact)
    return out


def _decisions(text: str, cap: int) -> Iterator[_Found]:
    """Stated decisions (rank 0), stated facts (rank 1, :func:`_statements`), intentions (rank 2)."""
    for rank, pattern in ((0, _STRONG_DECISION), (2, _WEAK_DECISION)):
        n = 0
        for m in pattern.finditer(text):
            if not (_word_start(text, m.start()) and _word_end(text, m.end())):
                continue
            sentence = _sentence(text, m.start(), m.end())
            if _is_prose(sentence):
                n += 1
                yield _Found(rank, m.start(), sentence)
                if n >= cap:
                    break
        if rank == 0:
            yield from _statements(text, cap)


# ---------------------------------------------------------------------------------------------- paths

_EXTENSIONS = (
    "py|pyi|pyx|js|mjs|ts|tsx|jsx|java|kt|c|h|cc|cpp|hpp|go|rs|rb|php|cs|swift|scala|pony|md|rst|txt|json|"
    "jsonl|yaml|yml|toml|cfg|ini|sh|html|css|sql|xml|lock|pem|conf|log|csv|ipynb|gradle|mk"
)
_PATH_TAIL = re.compile(r"/[\w.@+-]{1,100}(?:/[\w.@+-]{1,100}){0,30}")
_FILE_TAIL = re.compile(rf"\.(?:{_EXTENSIONS})\b")
_NAME_CHARS = re.compile(r"[\w.@+~-]{1,100}")  # matched on the reversed text before a tail
_PROGRESS_HEAD = re.compile(r"[.sxXfFE]*(?:\.{3}|[sxXfFE]{3})[.sxXfFE]*")
_HAS_EXTENSION = re.compile(rf".*\.(?:{_EXTENSIONS}|[A-Za-z]{{1,8}})", re.I)
_RANDOM_SEGMENT = re.compile(r"(?=[^/]*[a-z])(?=[^/]*[A-Z])(?=[^/]*\d)[A-Za-z0-9+]{12,}")


def _head_before(text: str, pos: int) -> int:
    """Start of the run of file-name characters that ends at `pos`."""
    m = _NAME_CHARS.match(text[max(0, pos - 100) : pos][::-1])
    return pos - (m.end() if m else 0)


def _plausible_path(path: str) -> bool:
    if not any(c.isalpha() for c in path) or path in ("/", "./"):
        return False
    segments = path.strip("/").split("/")
    if any(_RANDOM_SEGMENT.fullmatch(seg) for seg in segments):  # base64 and hashes, not paths
        return False
    if len(segments) == 1:
        return bool(_FILE_SUFFIX.search(segments[0]))
    if path.startswith(("/", "./", "../", "~/")) or _HAS_EXTENSION.fullmatch(segments[-1]):
        return True
    return path.count("/") >= 2 and any(seg.islower() or "_" in seg for seg in segments)


def _path_candidates(text: str) -> Iterator[tuple[int, str]]:
    for pattern in (_PATH_TAIL, _FILE_TAIL):
        for m in pattern.finditer(text):
            start = _head_before(text, m.start())
            if _PROGRESS_HEAD.fullmatch(text, start, m.start()):  # "....E./testbed/x.py": test progress
                start = m.start()
            if start > 0 and text[start - 1] in "/:@+<\\":  # a URL, an address, a closing tag
                continue
            if pattern is _FILE_TAIL and (start == m.start() or "/" in text[start : m.start()]):
                continue  # no name before the extension, or already found as a path with slashes
            yield start, text[start : m.end()]


class _Families:
    """Number shapes seen by a finder: a member of a family past FAMILY_BIG + 1 (enough to tell it is
    big, :func:`big_families`) is not yielded and does not count towards the finder's cap, so that
    240 generated files do not end the scan before the one the failure names."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    def excess(self, text: str) -> bool:
        shape = number_shape(text)
        self.seen[shape] += 1
        return self.seen[shape] > FAMILY_BIG + 1


def _paths(text: str, cap: int) -> Iterator[_Found]:
    n = 0
    families = _Families()
    for start, raw in _path_candidates(text):
        path = raw.rstrip(".,:;")
        if path.startswith(("a/", "b/")) and path.count("/") >= 2:  # git diff's a/ and b/ prefixes
            path = path[2:]
        if _plausible_path(path) and not families.excess(path):
            n += 1
            yield _Found(0 if "/" in path else 1, start, path)
            if n >= cap:
                return


# ---------------------------------------------------------------------------------------- identifiers

_DEFINED = re.compile(r"(?:def|class|func|function|fn|interface|struct)[ \t]+([A-Za-z_]\w{0,80})")
_CALLED = re.compile(r"(?<![\w.])([a-z_][a-z0-9]{0,40}(?:_[a-z0-9]{1,40}){1,8})\(")
_CAMEL = re.compile(r"(?<![\w.])((?:[A-Z][a-z0-9]{1,30}){2,8})(?![\w.])")
_DOTTED = re.compile(r"(?<![\w./-])([A-Za-z_]\w{0,40}(?:\.[A-Za-z_]\w{0,40}){1,6})(?![\w/-])(\()?")
_FILE_SUFFIX = re.compile(rf"\.(?:{_EXTENSIONS})$")


def _code_like_dotted(name: str, called: bool) -> bool:
    parts = name.split(".")
    if _FILE_SUFFIX.search(name) or min(len(p) for p in parts) < 2:
        return False
    return called or len(parts) >= 3 or any("_" in p or p[1:] != p[1:].lower() for p in parts)


def _identifiers(text: str, cap: int) -> Iterator[_Found]:
    """Names defined with def/class/func... first; then snake_case calls, CamelCase and dotted names."""
    for m in _DEFINED.finditer(text):
        if _word_start(text, m.start()):
            yield _Found(0, m.start(1), m[1])
    families = _Families()
    for pattern in (_CALLED, _CAMEL):
        n = 0
        for m in pattern.finditer(text):
            if n >= cap:
                break
            if not families.excess(m[1]):
                n += 1
                yield _Found(1, m.start(1), m[1] + ("()" if pattern is _CALLED else ""))
    n = 0
    for m in _DOTTED.finditer(text):
        if _code_like_dotted(m[1], bool(m[2])) and not families.excess(m[1]):
            n += 1
            yield _Found(1, m.start(1), m[1] + ("()" if m[2] else ""))
            if n >= cap:
                return


# -------------------------------------------------------------------------------------------- numbers

_NUMBER = re.compile(
    r"v?\d{1,9}(?:(\.\d{1,4}\.\d{1,6}(?:[-+.]?[A-Za-z]\w{0,11})?)"  # version 3.11.7, v1.2.3, 2.0.52-SNAPSHOT
    r"|( (?:passed|failed|errors?|skipped|xfailed|xpassed|warnings?|tests?|files? changed|insertions?|"
    r"deletions?|matches|occurrences)\b)"  # counts
    r"|((?:\.\d{1,6})? ?(?:ms|KB|MB|GB|KiB|MiB|GiB|kB|%|chars|tokens|bytes)(?!\w)))"  # units
)
_KEYWORD_NUMBER = re.compile(
    r"(?:port|Port|pid|PID|PR|issue|Issue|request|seed|Seed|timeout|Timeout|version|Version|code|status|Status)"
    r"(?: (?:is|was|number|no\.?|=))?:? ?#?\d[\d.]{0,20}"
)
_ISSUE = re.compile(r"#\d{2,7}\b")
_RETURNCODE = re.compile(r"<returncode>(-?\d{1,4})</returncode>")


def _context_start(text: str, start: int, words: int = 2) -> int:
    """Move `start` back over up to `words` words on the same line (words, not numbers: a number or
    the end of a log line's timestamp before a keyword is no context)."""
    for _ in range(words):
        j = start - 1
        while j >= 0 and text[j] == " ":
            j -= 1
        k = j
        while k >= 0 and (text[k].isalnum() or text[k] in "_-'"):
            k -= 1
        if k == j or any(c.isdigit() for c in text[k + 1 : j + 1]):
            break
        start = k + 1
    return start


def _numbers(text: str, cap: int) -> Iterator[_Found]:
    """Counts and numbers named by a keyword first, then versions, then numbers with units."""
    n = 0
    for m in _NUMBER.finditer(text):
        if (m[1] or m[2] or m[3]) and _word_start(text, m.start()) and text[m.end() : m.end() + 1] != ".":
            n += 1
            yield _Found(2 if m[3] else 1 if m[1] else 0, m.start(), m[0])
            if n >= cap:
                break
    for m in _KEYWORD_NUMBER.finditer(text):
        if _word_start(text, m.start()):
            start = _context_start(text, m.start())
            yield _Found(0, start, text[start : m.end()].rstrip("."))


_REF_HEAD = 80  # characters before an issue reference on its line that say what kind of number it is


def _references(text: str, cap: int) -> Iterator[_Found]:
    """Issue numbers and exit codes: literal-prefixed, cheap enough to scan the whole text.

    A `#N` that follows the same words on many lines is a counter, not an issue: ctest's
    `12/302 Test  #12: mod11_roundtrip ...`, BuildKit's `#12 [3/5] RUN make`. Of such a family (more than
    FAMILY_BIG lines whose text before the number has one shape, counted by :class:`_Families`),
    FAMILY_MAX are kept, and its members past FAMILY_BIG + 1 do not count towards `cap`; `#1234`
    and `#1250` in two different lines stay two issues."""
    refs: list[tuple[int, str, str]] = []
    families = _Families()  # keyed by the text before each reference, number-shaped
    for m in _ISSUE.finditer(text):
        if len(refs) >= cap:
            break
        if not _word_start(text, m.start()):
            continue
        lo = max(m.start() - _REF_HEAD, text.rfind("\n", max(0, m.start() - _REF_HEAD), m.start()) + 1)
        head = number_shape(" ".join(text[lo : m.start()].split()))
        if not families.excess(head):
            refs.append((m.start(), m[0], head))
    kept: Counter[str] = Counter()
    for pos, ref, head in refs:
        kept[head] += 1
        if families.seen[head] <= FAMILY_BIG or kept[head] <= FAMILY_MAX:
            yield _Found(0, pos, ref)
    for n, m in enumerate(_RETURNCODE.finditer(text)):
        if n >= cap:
            break
        yield _Found(0, m.start(), f"exit code {m[1]}")


# ----------------------------------------------------------------------------------------------- urls

# a URL names a host: `${URL#https://}` (a shell expansion) and `"https://" + host` are no URL
_URL = re.compile(r"https?://\w[^\s<>\"'`)\]]{0,299}")


def _urls(text: str, cap: int) -> Iterator[_Found]:
    for n, m in enumerate(_URL.finditer(text)):
        if n >= cap:
            return
        yield _Found(0, m.start(), m[0].rstrip(".,;:"))


# ------------------------------------------------------------------------------------------ selection

_Finder = Callable[[str, int], Iterator[_Found]]


def _windowed(finder: _Finder) -> _Finder:
    """Run `finder` on the first 64k and last 32k characters only (positions stay global)."""

    def run(text: str, cap: int) -> Iterator[_Found]:
        if len(text) <= _WINDOW_HEAD + _WINDOW_TAIL:
            yield from finder(text, cap)
            return
        yield from finder(text[:_WINDOW_HEAD], cap)
        offset = len(text) - _WINDOW_TAIL
        for found in finder(text[offset:], cap):
            yield _Found(found.rank, found.pos + offset, found.text)

    return run


def _both(first: _Finder, second: _Finder) -> _Finder:
    def run(text: str, cap: int) -> Iterator[_Found]:
        yield from first(text, cap)
        yield from second(text, cap)

    return run


_CATEGORIES: tuple[tuple[str, _Finder, float], ...] = (
    ("error", _errors, 0.25),
    ("decision", _windowed(_decisions), 0.2),
    ("path", _windowed(_paths), 0.2),
    ("identifier", _windowed(_identifiers), 0.15),
    ("number", _both(_references, _windowed(_numbers)), 0.12),
    ("url", _urls, 0.08),
)


_BY_SHAPE = frozenset({"error", "decision"})  # facts that differ only in their numbers are one
_FAMILIES = frozenset({"path", "identifier"})  # a big family of them lists FAMILY_MAX (big_families)


def _dedupe_key(fact: str) -> str:
    return fact.removesuffix("()").lower()


_DIGITS = re.compile(r"\d+")


def number_shape(text: str) -> str:
    """`text` with each run of digits as `#`: `mod017.c` and `mod203.c` are one shape."""
    return _DIGITS.sub("#", text)


def big_families(values: Iterable[str]) -> frozenset[str]:
    """The number shapes (:func:`number_shape`) that more than FAMILY_BIG of `values` share: a
    generated family (400 tests `adds_000` ... `adds_399`, 240 files `mod000.c` ...), not a few
    related names (`int32`, `int64`; `py38`, `py39`, `py310`)."""
    sizes = Counter(number_shape(v) for v in values)
    return frozenset(shape for shape, n in sizes.items() if n > FAMILY_BIG)


def _candidates(text: str, finder: _Finder, cap: int, by_shape: bool, families: bool) -> list[_Found]:
    """Unique facts of one category, strongest then earliest first.

    With `by_shape`, facts that differ only in their numbers count as one (28 lint errors that differ
    in the line number are one fact). With `families` (paths and identifiers), of a big family
    (:func:`big_families`) only the first FAMILY_MAX stay: 240 generated files would fill every slot
    of their category with one thing said again. Numbers and URLs keep theirs: `#1234` and `#1250`
    are two issues, not a family.
    """
    best: dict[str, _Found] = {}
    for found in finder(text, cap):
        fact = _clip(found.text)
        key = number_shape(_dedupe_key(fact)) if by_shape else _dedupe_key(fact)
        old = best.get(key)
        if fact and (old is None or (found.rank, found.pos) < (old.rank, old.pos)):
            best[key] = _Found(found.rank, found.pos, fact)
    ranked = sorted(best.values())
    if not families:
        return ranked
    big = big_families(_dedupe_key(f.text) for f in ranked)
    seen: Counter[str] = Counter()
    out = []
    for found in ranked:
        shape = number_shape(_dedupe_key(found.text))
        seen[shape] += 1
        if shape not in big or seen[shape] <= FAMILY_MAX:
            out.append(found)
    return out


def _take(pools: list[list[_Found]], chosen: list[list[_Found]], quotas: list[int], limit: int) -> None:
    """Move facts from each pool to its chosen list until it reaches its quota (or `limit` in all)."""
    taken = {_dedupe_key(f.text) for group in chosen for f in group}
    for pool, group, quota in zip(pools, chosen, quotas, strict=True):
        while pool and len(group) < quota and sum(map(len, chosen)) < limit:
            found = pool.pop(0)
            if _dedupe_key(found.text) not in taken:
                taken.add(_dedupe_key(found.text))
                group.append(found)


def extract_facts(text: str, max_facts: int = 40, skip: frozenset[str] = frozenset()) -> list[str]:
    """Key facts of `text`, deduplicated, errors and decisions first, at most `max_facts` of them.

    Each category gets a share of `max_facts` (errors 25%, decisions 20%, paths 20%, identifiers
    15%, numbers 12%, URLs 8%); slots a category cannot fill go round-robin to the others, in that
    order. Output is grouped by category in that order; within a category facts keep the order in
    which they occur in the text. Each fact is at most 200 characters. Categories named in `skip`
    are not extracted (their slots go to the others), e.g. "identifier" when a digest lists names.
    """
    return FactPools(text, max_facts, skip).take(max_facts)


class FactPools:
    """The candidate facts of `text`, scanned once (3 per fact of `most`, per category), from which
    `take(n)` picks the key facts for any n <= most without scanning the text again (a digest's size
    search asks for several n)."""

    def __init__(self, text: str, most: int, skip: frozenset[str] = frozenset()) -> None:
        self.most = most
        cap = 3 * most
        self._pools: list[list[_Found]] = (
            [
                _candidates(text, find, cap, name in _BY_SHAPE, name in _FAMILIES) if name not in skip else []
                for name, find, _ in _CATEGORIES
            ]
            if most > 0 and text
            else []
        )

    def take(self, max_facts: int, echoes: bool = False) -> list[str]:
        """At most `max_facts` key facts, as `extract_facts` picks them; with `echoes`, also those
        contained in another of them (a URL inside a stated decision: what a digest can still carry
        when the whole sentence does not fit)."""
        if max_facts <= 0 or not self._pools:
            return []
        pools = [list(pool) for pool in self._pools]
        chosen: list[list[_Found]] = [[] for _ in pools]
        _take(pools, chosen, [int(max_facts * share) for _, _, share in _CATEGORIES], max_facts)
        while sum(map(len, chosen)) < max_facts and any(pools):
            _take(pools, chosen, [len(group) + 1 for group in chosen], max_facts)
        found = [f.text for group in chosen for f in sorted(group, key=lambda f: f.pos)]
        return found if echoes else without_echoes(found)


def without_echoes(facts: Sequence[str]) -> list[str]:
    """`facts` without those contained verbatim in another of them (the other carries them)."""
    return [f for f in facts if not any(f in g and f != g for g in facts)]
