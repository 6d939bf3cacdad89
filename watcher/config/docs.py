"""The configuration's documentation, generated from the schema (:mod:`watcher.config.schema`).

Two outputs: docs/compactd.example.toml (every key at its default, with its doc and reload class)
and the README's reference tables (between ``<!-- BEGIN generated ... -->`` markers). Run::

    python -m watcher.config.docs --write   # regenerate both after changing a key
    python -m watcher.config.docs --check   # exit 1 if either is stale (./dev.sh test, tests)
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Final

from watcher.config.schema import AGENTS, MAX_AGENT_ID_LEN, SECTIONS, TABLE_KEYS
from watcher.config.spec import KeySpec, Reload

ROOT: Final = Path(__file__).resolve().parents[2]
EXAMPLE: Final = Path("docs") / "compactd.example.toml"
README: Final = Path("README.md")
WIDTH: Final = 100
COMMAND: Final = "python -m watcher.config.docs --write"


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


def _comment(text: str, indent: str = "", hang: str = "") -> list[str]:
    """``text`` as TOML comment lines of at most WIDTH characters; continuation lines indented by ``hang``."""
    wrap = textwrap.wrap(
        text,
        WIDTH - 2,
        initial_indent=indent,
        subsequent_indent=indent + hang,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [f"# {line}".rstrip() for line in wrap]


# --- docs/compactd.example.toml --------------------------------------------------------------------

_EXAMPLE_HEAD: Final = f"""\
# compactd.example.toml — every configuration key, set to its default.
# Generated from watcher/config/schema.py by `{COMMAND}`; do not edit by hand.
#
# Every key is optional: an empty file (or no file at all) gives exactly this configuration.
# Unknown tables and keys are errors, so a typo cannot be silently ignored.
#
# Where compactd looks (first match wins):
#   1. --config PATH                              (must exist)
#   2. $COMPACTD_CONFIG                           (must exist)
#   3. $CONFIGURATION_DIRECTORY/compactd.toml     (systemd ConfigurationDirectory=compactd)
#   4. /etc/compactd/compactd.toml
#   5. $XDG_CONFIG_HOME/compactd/compactd.toml    ($XDG_CONFIG_HOME defaults to ~/.config)
#
# Environment overrides: COMPACTD_<SECTION>_<KEY> is applied over the file, e.g.
#   COMPACTD_COMPACTION_RESERVE=0.2  COMPACTD_MODEL_PATH=/srv/models/m.gguf  COMPACTD_MODEL_ENABLED=false
# Values are parsed to the key's type (booleans: true/false, yes/no, on/off, 1/0) and validated like
# file values. [agents.*] cannot be set from the environment.
#
# Reload: SIGHUP re-reads the file (the environment overrides still apply over it). The last
# comment line of each key says what a reload does with a changed value:
"""

_EXAMPLE_TYPES: Final = """\
#
# Types: integers are accepted where numbers are expected (reserve = 1 is read as 1.0), but
# booleans are not numbers and numbers are not booleans.
"""

_AGENTS_HEAD: Final = f"""\
# [agents.<agent_id>] — per-agent overrides, one table per agent id (the name the agent sends in
# HELLO: 1-{MAX_AGENT_ID_LEN} printable characters; quote it if it is not a bare key: [agents."ci bot"]).
# Every key is optional; a key that is absent falls back as described below. A reload applies a
# changed table to its attached agent at once (it keeps its mirror, archive and pending proposals).
#
# Precedence for budget, reserve and policy: this table's value if present, else what the client
# requests when it connects, else [compaction] (default_budget / reserve / policy). The planner is
# never chosen by the client: this table's value, else [compaction].planner.
#
"""

_AGENTS_TAIL: Final = """\
#
# Generate a token with
#   python3 -c 'import secrets; print(secrets.token_urlsafe(32))'
# and keep this file readable only by the daemon's user (chmod 600) when it holds tokens.
#
# [agents.planner-bot]
"""


def _example_key(spec: KeySpec) -> list[str]:
    lines = _comment(spec.meta.doc)
    lines.append(f"# On reload: {spec.meta.reload.value}")
    if spec.meta.unset:
        lines.append(f"# {spec.name} = {toml_value(spec.meta.example)}")
    else:
        lines.append(f"{spec.name} = {toml_value(spec.default)}")
    return lines


def example_toml() -> str:
    out = [_EXAMPLE_HEAD.rstrip("\n")]
    for r in Reload:
        out += _comment(f"{r.value}: {r.meaning}", indent="  ", hang="  ")
    out.append(_EXAMPLE_TYPES.rstrip("\n"))
    for name in SECTIONS:
        out += ["", "", f"[{name}]"]
        for spec in TABLE_KEYS[name].values():
            out += _example_key(spec)
    out += ["", "", _AGENTS_HEAD.rstrip("\n")]
    for spec in TABLE_KEYS[AGENTS].values():
        out += _comment(f"{spec.name}: {spec.meta.doc}", indent="  ", hang="  ")
    out.append(_AGENTS_TAIL.rstrip("\n"))
    out += [f"# {spec.name} = {toml_value(spec.meta.example)}" for spec in TABLE_KEYS[AGENTS].values()]
    return "\n".join(out) + "\n"


# --- README.md -------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def config_table() -> str:
    rows = [
        "What a reload (SIGHUP) does with a changed key, the last column:",
        "",
        *[f"- *{r.value}*: {r.meaning}" for r in Reload],
        "",
        "| key | default | meaning | on reload (SIGHUP) |",
        "|---|---|---|---|",
    ]
    for name in SECTIONS:
        for spec in TABLE_KEYS[name].values():
            default = spec.meta.unset or f"`{toml_value(spec.default)}`"
            rows.append(
                f"| `{spec.dotted}` | {default} | {_cell(spec.meta.doc)} | {spec.meta.reload.value} |"
            )
    return "\n".join(rows)


def agent_table() -> str:
    rows = ["| key | example | meaning |", "|---|---|---|"]
    for spec in TABLE_KEYS[AGENTS].values():
        rows.append(f"| `{spec.name}` | `{toml_value(spec.meta.example)}` | {_cell(spec.meta.doc)} |")
    return "\n".join(rows)


BLOCKS: Final = {"config-keys": config_table, "agent-keys": agent_table}


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- BEGIN generated: {name} ({COMMAND}) -->", f"<!-- END generated: {name} -->"


def readme(current: str) -> str:
    """``current`` with each generated block replaced; ValueError if a block's markers are missing."""
    out = current
    for name, render in BLOCKS.items():
        begin, end = _markers(name)
        try:
            head, rest = out.split(begin, 1)
            _, tail = rest.split(end, 1)
        except ValueError:
            raise ValueError(f"{README}: the markers of the generated block {name!r} are missing") from None
        out = f"{head}{begin}\n{render()}\n{end}{tail}"
    return out


# --- the command -----------------------------------------------------------------------------------


def outputs(root: Path) -> dict[Path, str]:
    """Each generated file under ``root`` and the text it should have."""
    return {
        root / EXAMPLE: example_toml(),
        root / README: readme((root / README).read_text(encoding="utf-8")),
    }


def stale(root: Path = ROOT) -> list[Path]:
    """The generated files whose text differs from what the schema gives."""
    return [p for p, text in outputs(root).items() if p.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m watcher.config.docs", description=(__doc__ or "").split("\n")[0]
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the files")
    mode.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    parser.add_argument("--root", type=Path, default=ROOT, help="the source tree (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        return _run(args.root, write=args.write)
    except (OSError, ValueError) as exc:
        print(f"python -m watcher.config.docs: {exc}", file=sys.stderr)
        return 2


def _run(root: Path, *, write: bool) -> int:
    if write:
        for path, text in outputs(root).items():
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        return 0
    old = stale(root)
    for path in old:
        print(f"{path}: stale; run `{COMMAND}`", file=sys.stderr)
    return 1 if old else 0


if __name__ == "__main__":
    sys.exit(main())
