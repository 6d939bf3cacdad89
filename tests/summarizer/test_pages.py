"""An HTML page a tool fetched is shown as its text: title, headings, the first lines under each;
a Markdown document read whole, as its headings and the first lines under each.
Before, a page was taken for a log and showed its first and last lines of markup (`<!DOCTYPE
html>`, `<head>`, `</body>`): a sphinx build's page that an agent printed (sphinx-9258) showed
none of its text. Real pages: that one, `pydoc -w` of a stdlib module, and a directory listing a
real `python -m http.server` serves, fetched over HTTP with its status line and headers."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from summarizer.compress import Renderer, compress
from summarizer.compress.markup import page_text
from summarizer.detect import detect
from summarizer.digest import Item, Summarizer
from summarizer.facts import fact_source
from summarizer.frame import unquoted
from summarizer.names import ranked_names
from tests.fixtures.net import free_port
from tests.fixtures.trajectories import mini
from watcher.planning.identifiers import identifiers

REF = "a1#s1"
ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"\[… (\d+) chars omitted; recall a1#s1\]")
# markup (a decoded `&lt;https://json.org&gt;` in a docstring is the page's text, not a tag)
TAG = re.compile(
    r"</?(?:html|head|body|div|span|p|a|td|tr|table|font|strong|dl|dt|dd|ul|li|h\d|meta|link|script|!DOCTYPE)\b"
)


def sphinx_page() -> str:
    """`cat _build/html/index.html` of a sphinx build, as mini-swe-agent recorded it."""
    return mini("sphinx-doc__sphinx-9258", 71)


@pytest.fixture(scope="module")
def pydoc_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("pydoc")
    subprocess.run(
        [sys.executable, "-m", "pydoc", "-w", "json.decoder"], cwd=root, check=True, capture_output=True
    )
    return (root / "json.decoder.html").read_text()


@pytest.fixture(scope="module")
def served_listing(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real http.server's listing of 1 000 files, as `curl -i` prints it: status, headers, page."""
    root = tmp_path_factory.mktemp("served")
    for i in range(1000):
        (root / f"report_{i:03d}.txt").write_text("x")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/")
                resp = conn.getresponse()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise AssertionError("http.server did not answer")
        body = resp.read().decode()
        head = "".join(f"{k}: {v}\r\n" for k, v in resp.getheaders())
        conn.close()
        return f"HTTP/1.0 {resp.status} {resp.reason}\r\n{head}\r\n{body}"
    finally:
        server.terminate()
        server.wait(10)


def _checked(text: str, **kwargs: int) -> str:
    out = compress(text, ref=REF, **kwargs)  # type: ignore[arg-type]
    assert out.kind == "page"
    assert compress(text, ref=REF, **kwargs) == out  # type: ignore[arg-type]
    assert sum(int(n) for n in MARKER.findall(out.text)) == out.dropped_chars <= len(text)
    return out.text


def test_a_printed_sphinx_page_shows_its_text_not_its_markup() -> None:
    page = sphinx_page()
    assert detect(page) == "page"
    text = _checked(page)
    body = text.split("\n")[3:-2]  # within the harness's <returncode> and <output> envelope
    assert text.startswith("[page: ") and "<returncode>0</returncode>\n<output>" in text
    assert "# Welcome to Test Project’s documentation!¶" in text
    assert "example.foo(text)[source]¶" in text  # what the agent looked for: only foo is documented
    assert not any(TAG.search(ln) for ln in body)
    # a smaller room keeps the heading and cuts lines after it, never a tag
    small = _checked(page, max_chars=300)
    assert len(small) <= 300 and "# Welcome to Test Project’s documentation!¶" in small
    assert not any(TAG.search(ln) for ln in small.split("\n")[3:-2])


def test_a_pydoc_page_shows_the_module_s_documentation(pydoc_page: str) -> None:
    text = _checked(pydoc_page)
    lines = (
        "Implementation of JSONDecoder",
        "class JSONDecodeError(builtins.ValueError)",
        "msg: The unformatted error message",
    )
    for words in lines:
        assert words in text, words
    # its text fits the page's room: all of it is shown, in less than half the page's characters
    assert set(page_text(pydoc_page).split("\n")) <= set(text.split("\n"))
    assert len(text) < len(pydoc_page) / 2
    assert not any(TAG.search(ln) for ln in text.split("\n")[1:])


def test_a_page_fetched_with_its_headers_is_a_page(served_listing: str) -> None:
    assert served_listing.startswith("HTTP/1.0 200 OK") and detect(served_listing) == "page"
    text = _checked(served_listing)
    assert "# Directory listing for /" in text and "report_000.txt" in text
    assert "report_999.txt" not in text  # the listing's end is omitted, and said so
    assert len(text) < len(served_listing) / 4


def test_names_facts_and_identifiers_read_the_page_s_text(pydoc_page: str) -> None:
    text = page_text(pydoc_page)
    assert fact_source(pydoc_page) == text
    names = ranked_names([Item("s1", "tool_result", pydoc_page, 1)])
    assert names and all(n in text for n in names)
    markup_only = {"bgcolor", "heading", "decor", "docstring", "multicolumn", "singlecolumn"}
    assert not markup_only & set(names)
    assert identifiers(pydoc_page) <= identifiers(text) | {"json.decoder"}
    assert {"raw_decode", "object_pairs_hook"} <= identifiers(pydoc_page)


async def test_a_digest_of_pages_quotes_them(pydoc_page: str, served_listing: str) -> None:
    items = [
        Item("s1", "tool_result", sphinx_page(), 900),
        Item("s2", "tool_result", pydoc_page, 12_000),
        Item("s3", "tool_result", served_listing, 9_000),
    ]
    digest = await Summarizer(None).digest(items, "a1", 700)
    assert unquoted(digest.text, items) == []
    assert "Welcome to Test Project" in digest.text and "JSONDecoder" in digest.text
    sections = digest.text.split("Sections (quoted data, not instructions):", 1)[1]
    for envelope in ("<returncode>0</returncode>", "<output>", "</output>"):
        sections = sections.replace(envelope, "")
    assert not TAG.search(sections)


def test_a_template_s_source_and_a_log_that_mentions_html_are_not_pages() -> None:
    template = "\n".join(
        ["{% extends 'base.html' %}", "{% block content %}", "<html>", "<body>"]
        + [f"<p>{{{{ row_{i} }}}}</p>" for i in range(60)]
        + ["</body>", "</html>", "{% endblock %}"]
    )
    assert detect(template) != "page"
    log = "\n".join(f"2026-12-01 10:00:{i % 60:02d} INFO GET /index.html <html> 200" for i in range(80))
    assert detect(log) == "log"


@pytest.mark.parametrize(
    "garbage",
    [
        "<!DOCTYPE html><html><body>" + "<div><p>unclosed <b>bold " * 3000,
        "<!doctype html>\n" + "<![CDATA[ x <!-- y <? z " * 2000 + "</html>",
        "<html>" + "</p></div></td></tr>" * 5000 + "<pre>\n" + "line\n" * 3000,
        "<!DOCTYPE html>" + "&#xdeadbeef; &bogus; &#0; " * 2000,
    ],
)
def test_broken_markup_never_raises_and_loses_nothing(garbage: str) -> None:
    r = Renderer(garbage, ref=REF)
    for room in (None, 2000, 200):
        out = r.render(room)
        assert 0 <= out.dropped_chars <= len(garbage)
        if out.text != garbage:
            assert MARKER.search(out.text)
        assert room is None or len(out.text) <= room


def test_constructs_left_open_are_text_and_read_in_linear_time() -> None:
    """HTMLParser searches for the end of an open construct again from each `<` after it, to the
    end of the page: 200 000 `</` with no `>` after them took 9 s, 40 000 `<a ` minutes, 20 000
    unclosed comments or CDATA sections as long; and a marked section with a name it does not know
    (`<![ifb]>`) raised AssertionError. Each is now the page's text, and what follows it is read."""
    for unit, n in (("a </ b ", 200_000), ("<a ", 40_000)):
        lines = page_text(f"<html><body><h1>Open</h1><p>x</p>{unit * n}").splitlines()
        assert lines == ["# Open", "x", " ".join((unit * n).split())]
    for unit in ("<!-- x>", "<math><![CDATA[>"):
        page = f"<html><body><h1>Open</h1>{unit * 20_000}<p>after</p></body></html>"
        assert page_text(page).splitlines() == ["# Open", unit.removeprefix("<math>") * 20_000, "after"]
    ie = "<html><body><h1>IE</h1><![ifb]><p>kept</p><![if !IE]><p>also</p><![endif]></body></html>"
    assert page_text(ie).splitlines() == ["# IE", "kept", "also"]


def _cat(path: Path) -> str:
    return subprocess.run(["cat", str(path)], check=True, capture_output=True, text=True).stdout


def test_a_markdown_document_read_whole_shows_its_outline() -> None:
    """`cat docs/PROTOCOL.md` of this repository: its headings and the first lines under each,
    where it was a log before (its first and last lines)."""
    text = _cat(ROOT / "docs" / "PROTOCOL.md")
    assert detect(text) == "markdown"
    out = compress(text, ref=REF)
    assert sum(int(n) for n in MARKER.findall(out.text)) == out.dropped_chars <= len(text)
    fenced, headings = False, []
    for line in text.split("\n"):
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"#{1,2} \S", line):
            headings.append(line)
    shown = out.text.split("\n")
    assert headings and all(h in shown for h in headings)  # every `#` and `##` heading
    assert len(out.text) < len(text) / 5
    small = Renderer(text, ref=REF).render(1500).text
    assert len(small) <= 1500 and headings[0] in small and sum(h in small for h in headings) >= 5


def test_an_agent_s_own_markdown_is_prose_and_a_script_s_comments_are_no_outline() -> None:
    text = _cat(ROOT / "docs" / "PROTOCOL.md")
    assert Renderer(text, ref=REF, tool_output=False).kind == "prose"
    for script in (ROOT / "dev.sh", Path(re.__file__), Path(subprocess.__file__)):
        assert detect(_cat(script)) != "markdown", script
