"""The digest's names line: the code names a region's agent goes back to survive a small digest."""

from __future__ import annotations

import re

from summarizer.digest import Item, Summarizer
from summarizer.layout import NAMES_LABEL
from summarizer.names import pick_names, ranked_names
from summarizer.tokenizer import load_counter

_VERBS = ("resolve", "merge", "load", "flush", "render", "check", "index", "split", "bind", "close")
_NOUNS = ("scope", "alias", "frame", "bucket", "ledger", "cursor", "window", "token", "shard", "queue")


def _file_read(path: str, first_line: int, n_funcs: int, salt: int) -> str:
    """A `cat -n` of a Python module: classes and functions with distinct names, as an agent reads."""
    lines = []
    for k in range(n_funcs):
        verb, noun = _VERBS[(k + salt) % 10], _NOUNS[(k * 3 + salt) % 10]
        name = f"{verb}_{noun}_{k + salt}"
        local = f"{noun}_{verb}_seen"  # a local variable and an attribute: no def, no call
        lines += [
            f"def {name}(ctx, limit=None):",
            f'    """Return the {noun} that the {verb} step produced for this context."""',
            f"    {local} = ctx.lookup({noun!r})",
            f"    if limit is not None and {local} > limit:",
            f"        raise {noun.title()}Overflow({local}, ctx._{noun}{k + salt}_pending)",
            *(f"    # step {j}: the value is checked against the limit, kept when lower" for j in range(16)),
            f"    return {local}",
            "",
        ]
    body = "\n".join(f"{first_line + i:6d}\t{ln}" for i, ln in enumerate(lines))
    return f"<returncode>0</returncode>\n<output>\n# {path}\n{body}\n</output>"


def _region() -> list[Item]:
    reads = [
        _file_read("src/engine/scopes.py", 100, 4, 0),
        _file_read("src/engine/ledger.py", 40, 4, 20),
        _file_read("src/engine/queues.py", 300, 4, 40),
        _file_read("src/engine/frames.py", 10, 4, 60),
        _file_read("src/engine/shards.py", 500, 4, 80),
    ]
    prose = [
        "THOUGHT: The overflow comes from `resolve_scope_0` in src/engine/scopes.py; it calls "
        "`ctx.lookup` without the limit that `merge_frame_41` passes. Let me read the ledger module.",
        "THOUGHT: `load_bucket_22` looks like the culprit: it raises BucketOverflow when the shard is "
        "full. Let me check the queue module too.",
        "THOUGHT: Nothing in queues.py sets the limit either. I will look at how `close_window_49` "
        "is called.",
        "THOUGHT: The frames module has the same pattern. Let me look at the shards module.",
        "THOUGHT: So every module reads the value without a limit. Let me write the fix now.",
    ]
    items: list[Item] = []
    for k, (p, r) in enumerate(zip(prose, reads, strict=True)):
        items.append(Item(f"s{2 * k:05d}", "assistant", p, len(p) // 3))
        items.append(Item(f"s{2 * k + 1:05d}", "tool_result", r, len(r) // 3))
    return items


def _names_line(text: str) -> list[str]:
    line = next((ln for ln in text.split("\n") if ln.startswith(NAMES_LABEL)), "")
    return line.removeprefix(NAMES_LABEL).split()


async def test_names_the_agent_used_and_read_survive_a_digest_at_one_eighth(model_path: str) -> None:
    count = load_counter(model_path)
    items = [Item(i.id, i.kind, i.text, count(i.text)) for i in _region()]
    before = sum(i.tokens for i in items)
    target = before // 8
    d = await Summarizer(None, count=count).digest(items, "a7", target)
    assert d.tokens <= target < before
    # what the agent named in its own reasoning, and what it read, is named again later by the agent
    later = ["resolve_scope_0", "merge_frame_41", "load_bucket_22", "close_window_49", "BucketOverflow"]
    later += ["scope_resolve_seen", "_window22_pending", "queue_flush_seen", "_window42_pending"]
    for name in later:
        assert name in d.text, (name, d.text)
    region = "\n".join(i.text for i in items)
    defined = re.findall(r"def (\w+)", region) + re.findall(r"    (\w+) = ctx", region)
    assert sum(n in d.text for n in set(defined)) >= 0.8 * len(set(defined)), d.text
    # every name quoted is verbatim region text, listed once, and not already shown elsewhere
    names = _names_line(d.text)
    assert names and all(n in region for n in names)
    assert len(set(names)) == len(names)
    rest = d.text.replace(NAMES_LABEL + " ".join(names), "")
    assert not any(n in rest for n in names)
    again = await Summarizer(None, count=count).digest(items, "a7", target)
    assert again.text == d.text  # byte-deterministic


def test_ranked_names_put_the_agents_own_words_first_then_definitions() -> None:
    items = [
        Item("s1", "tool_result", "x = helper_fn(1)\ndef parse_header(b):\n    return helper_fn(b)\n", 20),
        Item("s2", "assistant", "The bug is in `parse_header`; see MyReader in io_utils.py.", 15),
        Item("s3", "digest", "[compactd digest ...] old_name_in_digest", 10),
    ]
    ranked = ranked_names(items)
    assert ranked[:3] == ("parse_header", "MyReader", "io_utils.py")
    assert ranked[3] == "helper_fn"
    assert "old_name_in_digest" not in ranked  # an earlier digest is already in view verbatim
    assert "__init__" not in ranked_names([Item("s", "tool_result", "def __init__(self): pass", 5)])


def test_ranked_names_prefer_the_latest_work_and_the_agents_commands() -> None:
    items = [
        Item("s1", "tool_result", "def old_helper(a):\n    return a\n", 10),
        Item("s2", "tool_result", "def new_helper(b):\n    return b\n", 10),
        Item("s3", "tool_call", "sed -i 's/x/y/' src/edit_me.py", 10),
    ]
    ranked = ranked_names(items)
    assert ranked[0] == "edit_me.py", "the agent's own command is its own vocabulary"
    assert ranked.index("new_helper") < ranked.index("old_helper"), "the later read first"


def test_pick_names_keeps_a_floor_of_room_when_the_rest_filled_the_digest() -> None:
    names = ("parse_header", "MyReader", "io_utils.py")
    rest = "x" * 600  # the rest of the digest left no room: the names still get 5% of its size
    assert pick_names(names, rest, -100) == ["parse_header", "MyReader"]
    assert pick_names(names, rest, 1000) == list(names)


def test_pick_names_skips_what_is_shown_and_fits_its_room() -> None:
    names = ("parse_header", "parse", "MyReader", "a_very_long_name_that_does_not_fit_here", "io_utils.py")
    assert pick_names(names, "shown: MyReader", 40) == ["parse_header", "io_utils.py"]
    assert pick_names(names, "", 0) == []


def test_pick_names_shows_two_of_a_big_family_of_numbered_names_and_a_small_one_whole() -> None:
    """400 generated tests `adds_000` ... would fill the line with one thing said again: two go
    (counting one shown elsewhere), and the room goes to the other names; a few related names that
    differ in a number (`int32`, `int64`) are not such a family."""
    names = (*(f"adds_{i:03d}" for i in range(400)), "parse_port", "int32_cast", "int64_cast")
    assert pick_names(names, "", 10_000) == ["adds_000", "adds_001", "parse_port", "int32_cast", "int64_cast"]
    assert pick_names(names, "test adds_000 ... ok", 10_000)[:2] == ["adds_001", "parse_port"]


def test_a_ci_log_s_set_up_is_no_source_of_names() -> None:
    """The runner's and the checkout's settings (`defaultBranch`, `GITHUB_TOKEN`) name nothing the
    agent works on; the failing step's names stay (summarizer.facts.fact_source, as for key facts)."""
    stamp = "2026-04-23T08:31:{:02d}.0000000Z "
    setup = ["Current runner version: '2.333.1'", "##[group]Run actions/checkout@v4"]
    setup += ["[command]/usr/bin/git config --global init.defaultBranch main", "GITHUB_TOKEN: ***"]
    setup += ["[command]/usr/bin/git config --local core.worktreeConfig true", "##[endgroup]"]
    failing = ["##[group]Run pytest tests/", "##[endgroup]", "FAILED tests/test_report.py::test_parse_header"]
    failing += ["E   ValueError: header_line missing", "##[error]Process completed with exit code 1."]
    text = "\n".join(stamp.format(k) + ln for k, ln in enumerate(setup + failing))
    names = ranked_names([Item("s1", "tool_result", text, 400)])
    assert {"test_parse_header", "test_report.py", "ValueError", "header_line"} <= set(names)
    assert not {"defaultBranch", "GITHUB_TOKEN", "worktreeConfig"} & set(names)
    # without CI steps every line is a source, as before
    plain = ranked_names([Item("s1", "tool_result", text.replace("##[group]Run ", "== "), 400)])
    assert {"defaultBranch", "GITHUB_TOKEN", "test_parse_header"} <= set(plain)


def test_a_word_that_holds_a_generated_id_is_no_name() -> None:
    """A `conda list` gives each package a build string (`py311h1ddb823_0`), a runner names its
    temporary script by a UUID, a framework hashes a constraint's name: no agent types those again.
    The packages' own names, a test named after a hex-looking word and a migration file named by its
    revision id (Alembic's) stay names."""
    listing = "\n".join(
        [
            "# Name                    Version                   Build  Channel",
            "_openmp_mutex             4.5                       2_gnu    conda-forge",
            "cached_property           1.5.2                hd8ed1ab_1    conda-forge",
            "jupyter_client            8.6.3              pyhd8ed1ab_1    conda-forge",
            "numpy                     2.2.6           py311h5d046bc_0    conda-forge",
            "/home/runner/work/_temp/af5455c7-a5c5-4bc4-95e4-7c5a8bdcfb68.sh: line 3: conda: not found",
            'CONSTRAINT "b_manage_address_account_id_7de0ae37_fk" FOREIGN KEY',
            "test_decode_b64_payload PASSED; test_crc32_of_1234567 PASSED",
            "alembic/versions/c3a8f1b2d4e6_add_users_table.py",
        ]
    )
    names = ranked_names([Item("s1", "tool_result", listing, 200)])
    ids = ("hd8ed1ab_1", "pyhd8ed1ab_1", "py311h5d046bc_0", "af5455c7-a5c5-4bc4-95e4-7c5a8bdcfb68.sh")
    assert not [n for n in names if n in ids or "7de0ae37" in n], names
    keep = ("_openmp_mutex", "cached_property", "jupyter_client", "test_decode_b64_payload")
    for name in (*keep, "c3a8f1b2d4e6_add_users_table.py"):  # (a migration's revision id: a file)
        assert name in names, names
    assert "test_crc32_of_1234567" in names, "seven digits and no hex letter: a number, not an id"
