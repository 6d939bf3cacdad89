"""Web pages (HTML a tool fetched: `curl`, `wget -O-`, a `requests` call printed) and Markdown
documents (a README read whole): their outline.

A page's markup is most of its bytes and says nothing an agent reads: navigation, scripts, styles,
attributes. `page_lines` reads the page as a browser's reader view would (the title, the headings,
paragraphs, list items, table rows, code blocks line by line) with the stdlib's HTMLParser, given
each construct left open as text (`_escape_open`: it never raises on broken markup, and reads in
linear time); `compress_page` shows every heading and the first lines under each,
within a fixed room, each run of text left out one omission marker. A shown line is the page's own
text: its words are the region's (entities decoded: summarizer.frame reads the page decoded too).
A Markdown document is outlined the same way by its `#` headings, each line shown as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser

from summarizer.compress.out import Out, plural

PAGE_CHARS = 6000  # a page's rendering shows about this much of its text
_PARSE_MAX = 2_000_000  # a longer page is read up to here (bounded work); the rest is omitted
_SECTION_MIN = 160  # each heading's section shows at least this much of its first lines
_HEADINGS_MAX = 80  # more headings than this: the first 80 are the outline
_MARKER = 40  # about the size of an omission marker
_LINE_MAX = 400  # a longer paragraph is shown up to here (Out clips it with a marker)

_SKIP = frozenset(("script", "style", "noscript", "template", "svg", "nav", "select", "button"))
_BLOCK = frozenset(
    (
        "p", "div", "section", "article", "main", "header", "footer", "aside", "form", "fieldset",
        "ul", "ol", "li", "dl", "dt", "dd", "table", "thead", "tbody", "tfoot", "tr", "blockquote",
        "figure", "figcaption", "details", "summary", "hr", "br", "body", "html", "caption", "address",
        "h1", "h2", "h3", "h4", "h5", "h6", "pre", "title", "label", "legend",
    )
)  # fmt: skip
_CELL = frozenset(("td", "th"))
_HEADING = re.compile(r"h([1-6])")


@dataclass(frozen=True)
class Line:
    """One line of a page's text: `level` 1–6 for a heading, 0 otherwise."""

    text: str
    level: int


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[Line] = []
        self.title = ""
        self._skip: list[str] = []
        self._in_title = False
        self._pre = 0
        self._level = 0
        self._cells: list[str] = []
        self._buf: list[str] = []

    def _flush(self) -> None:
        text = "".join(self._buf)
        self._buf.clear()
        if self._pre:
            for ln in text.split("\n"):
                if ln.strip():
                    self.lines.append(Line(ln.rstrip(), 0))
            return
        text = " ".join(text.split())
        if text:
            prefix = "#" * self._level + " " if self._level else ""
            self.lines.append(Line(prefix + text, self._level))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip.append(tag)
            return
        if self._skip:
            return
        if tag == "title":
            self._in_title = True
            return
        if tag in _CELL:
            self._end_cell()
        elif tag in _BLOCK:
            self._end_row()
            self._flush()
            if tag == "pre":
                self._pre += 1
            elif m := _HEADING.fullmatch(tag):
                self._level = int(m[1])

    def handle_endtag(self, tag: str) -> None:
        if self._skip:
            if tag == self._skip[-1]:
                self._skip.pop()
            return
        if tag == "title":
            self._in_title = False
            return
        if tag in _CELL:
            self._end_cell()
        elif tag in _BLOCK:
            if tag == "tr":
                self._end_row()
            self._flush()
            if tag == "pre":
                self._pre = max(0, self._pre - 1)
            elif _HEADING.fullmatch(tag):
                self._level = 0

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self._buf.append(data)

    def _end_cell(self) -> None:
        text = " ".join("".join(self._buf).split())
        self._buf.clear()
        if text:
            self._cells.append(text)

    def _end_row(self) -> None:
        if self._cells:
            self._end_cell()
            self.lines.append(Line(" | ".join(self._cells), 0))
            self._cells = []

    def parse_marked_section(self, i: int, report: bool = True) -> int:
        """`<![name ...]>`; a name HTMLParser does not know (it raises AssertionError) is a comment."""
        try:
            return super().parse_marked_section(i, report)
        except AssertionError:
            return self.parse_bogus_comment(i)

    def finish(self) -> None:
        self.close()
        self._end_row()
        self._flush()


# Every construct HTMLParser reads ends in `>`; one left open is searched for its end again from
# each `<` after it, to the end of the page: quadratic (200 000 `</` with no `>` after them took
# 9 s, 20 000 `<a ` 52 s). So every `<` after the page's last `>` is text (`&lt;`), as is a comment
# or a marked section whose end does not come later in the page (it is searched for by a pattern,
# not a `>`).
_OPENS = re.compile(r"<!(?:(?P<ms>\[\s*(?P<name>[A-Za-z]*))|(?P<cmt>--))?")
_ENDS = {"cmt": re.compile(r"--\s*>"), "ms": re.compile(r"\]\s*>"), "cdata": re.compile(r"\]\s*\]\s*>")}
_CDATA_LIKE = frozenset({"temp", "cdata", "ignore", "include", "rcdata"})  # end in `]]>`, others `]>`


def _last_start(pattern: re.Pattern[str], text: str) -> int:
    last = -1
    for m in pattern.finditer(text):
        last = m.start()
    return last


def _escape_open(page: str) -> str:
    """`page` with each `<` that would leave a construct open given as `&lt;` (see _OPENS)."""
    cut = page.rfind(">") + 1  # after the last `>`, nothing can close
    head = page[:cut]
    last = {key: _last_start(pattern, head) for key, pattern in _ENDS.items()}

    def one(m: re.Match[str]) -> str:
        at, whole = m.start(), m.group()
        if m.group("cmt") is not None:
            keep = last["cmt"] >= at + 4  # HTMLParser looks for the end after `<!--`
        elif m.group("ms") is not None:
            name = m.group("name").lower()
            keep = bool(name) and (last["cdata"] if name in _CDATA_LIKE else last["ms"]) >= at + 3
        else:
            keep = True  # `<!doctype …>`, `<!x …>`: to the next `>`, which comes later
        return whole if keep else "&lt;" + whole[1:]

    return _OPENS.sub(one, head) + page[cut:].replace("<", "&lt;")


def page_lines(page: str) -> tuple[str, list[Line]]:
    """(title, lines of text) of an HTML page, read up to _PARSE_MAX characters."""
    reader = _Reader()
    reader.feed(_escape_open(page[:_PARSE_MAX]))
    reader.finish()
    return " ".join(reader.title.split()), reader.lines


def page_text(page: str) -> str:
    """A page's title and text, a line per block: what names, key facts and the frame check read."""
    title, lines = page_lines(page)
    return "\n".join([title, *(ln.text for ln in lines)] if title else [ln.text for ln in lines])


def _sections(lines: list[Line]) -> list[list[int]]:
    """Indices of `lines` by section: each heading starts one (the text before the first: one)."""
    out: list[list[int]] = [[]]
    for i, ln in enumerate(lines):
        if ln.level and out[-1]:
            out.append([])
        out[-1].append(i)
    return [s for s in out if s]


def _chosen(lines: list[Line], room: int) -> set[int]:
    """The lines shown: all when they fit; else the headings (up to _HEADINGS_MAX, in half the
    room, the first in any room it fits) and the first lines of each section in their order, the
    room shared equally by the sections (at least _SECTION_MIN each, so a page of many sections
    shows its first ones)."""
    size = [min(len(ln.text), _LINE_MAX) + 1 for ln in lines]
    if sum(size) <= room:
        return set(range(len(lines)))
    size = [n + _MARKER for n in size]  # a line shown may be followed by an omission marker
    keep: set[int] = set()
    used = 0
    for i, ln in enumerate(lines):  # the first heading in any room it fits, the others in half
        if ln.level and len(keep) < _HEADINGS_MAX and used + size[i] <= (room // 2 if keep else room):
            keep.add(i)
            used += size[i]
    sections = _sections(lines)
    share = max(_SECTION_MIN, (room - used) // max(1, len(sections)))
    for section in sections:
        if used >= room:
            break
        taken = 0
        for i in section:
            if lines[i].level:
                continue
            if taken and (taken + size[i] > share or used + size[i] > room):
                break
            keep.add(i)
            taken += size[i]
            used += size[i]
            if taken >= share:
                break
    return keep


def _outline(title: str, lines: list[Line], size: int, ref: str, room: int) -> tuple[str, int]:
    """(rendering, dropped chars) of a document of `size` characters read as `title` and `lines`:
    the lines `_chosen` keeps, each run of others one omission marker; the last marker also stands
    for what is not text (markup, blank lines, a page's part beyond _PARSE_MAX), so that the
    markers' counts add up to the characters not shown."""
    keep = _chosen(lines, room - len(title))
    out = Out(ref)
    if title:
        out.keep(title)
    shown = len(title)
    pending = 0  # text of lines left out since the last line shown
    for i, ln in enumerate(lines):
        if i not in keep:
            pending += len(ln.text) + 1
            continue
        if pending:
            out.omit(pending)
            pending = 0
        out.keep(ln.text)
        shown += len(ln.text) + 1
    out.omit(max(pending, size - shown - out.dropped))
    return out.render(), out.dropped


def _counts(lines: list[Line]) -> str:
    return f"{plural(len(lines), 'line')} of text, {plural(sum(1 for ln in lines if ln.level), 'heading')}"


def compress_page(body: str, ref: str, room: int = PAGE_CHARS) -> tuple[str, str, int]:
    """A page as its title, headings and first lines under each, in about `room` characters (see
    the module's doc)."""
    title, lines = page_lines(body)
    text, dropped = _outline(title, lines, len(body), ref, room)
    return f"page: {_counts(lines)}, {len(body)} chars of markup", text, dropped


_MD_HEADING = re.compile(r"(#{1,6})[ \t]+\S")
_FENCE = re.compile(r" {0,3}(?:```|~~~)")


def markdown_lines(body: str) -> list[Line]:
    """A Markdown document's non-blank lines as they are, its ATX headings (`#` to `######`, not
    inside a fenced code block) with their level."""
    lines: list[Line] = []
    fenced = False
    for raw in body.split("\n"):
        if not raw.strip():
            continue
        if _FENCE.match(raw):
            fenced = not fenced
        m = None if fenced else _MD_HEADING.match(raw)
        lines.append(Line(raw.rstrip(), len(m[1]) if m else 0))
    return lines


def compress_markdown(body: str, ref: str, room: int = PAGE_CHARS) -> tuple[str, str, int]:
    """A Markdown document (a README, a docs page read whole) as its headings and the first lines
    under each, in about `room` characters, as a page is shown."""
    lines = markdown_lines(body)
    text, dropped = _outline("", lines, len(body), ref, room)
    return f"markdown: {_counts(lines)}", text, dropped
