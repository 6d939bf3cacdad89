"""Value rules of the configuration: what a key's value must be, and the messages when it is not.

A :class:`Rule` completes the sentence "must be ..." and says whether a value satisfies it; the
schema (:mod:`watcher.config.schema`) attaches one to each key that needs more than its type.
:func:`check_value` applies a key's type and rule and raises :class:`Invalid` with the part of the
message after ``key:`` (the loader adds where the value came from).
"""

from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final


class Invalid(Exception):
    """A value is wrong; the message is the part after ``key:``."""


@dataclass(frozen=True)
class Rule:
    what: str  # completes "must be ...", e.g. "a number in (0, 1)"
    ok: Callable[[Any], bool]


def _fmt(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def interval(lo: float, hi: float, *, open_: bool = False) -> Rule:
    noun = "a number" if isinstance(lo, float) else "an integer"
    if open_:
        return Rule(f"{noun} in ({_fmt(lo)}, {_fmt(hi)})", lambda v: lo < v < hi)
    return Rule(f"{noun} in [{_fmt(lo)}, {_fmt(hi)}]", lambda v: lo <= v <= hi)


def at_least(lo: int) -> Rule:
    return Rule(f"an integer >= {lo}", lambda v: v >= lo)


def positive() -> Rule:
    return Rule("a number > 0", lambda v: v > 0)


def at_least_zero() -> Rule:
    return Rule("a number >= 0", lambda v: v >= 0)


def one_of(*choices: object) -> Rule:
    return Rule("one of " + ", ".join(map(repr, choices)), lambda v: v in choices)


def absolute_path_or_empty(empty_means: str) -> Rule:
    return Rule(f"'' ({empty_means}) or an absolute path", lambda v: v == "" or os.path.isabs(v))


def address(what: str, parse: Callable[[str], object]) -> Rule:
    """The empty string (off) or a string ``parse`` accepts."""

    def ok(v: str) -> bool:
        try:
            return v == "" or parse(v) is not None
        except ValueError:
            return False

    return Rule(f"'' (off) or {what}", ok)


def parse_listen(listen: str) -> tuple[str, int]:
    """Split ``"HOST:PORT"`` (IPv6 as ``"[::1]:9464"``) into ``(host, port)``; ValueError if malformed."""
    host, sep, port = listen.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"IPv6 addresses need brackets: {listen!r}")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"not HOST:PORT: {listen!r}")
    return host, int(port)


def parse_mqtt_url(url: str) -> tuple[str, int]:
    """Split ``"mqtt://HOST[:PORT]"`` into ``(host, port)`` (port 1883 if absent); ValueError if malformed."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port  # raises ValueError if out of range
    if parts.scheme != "mqtt" or not parts.hostname or parts.username is not None:
        raise ValueError(f"not mqtt://HOST[:PORT]: {url!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"not mqtt://HOST[:PORT]: {url!r}")
    return parts.hostname, port or 1883


def parse_http_url(url: str) -> str:
    """An OpenAI-compatible API base: http(s)://HOST[:PORT][/PATH], no query; ValueError if not."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"not http[s]://HOST[:PORT][/PATH]: {url!r}")
    _ = parts.port  # ValueError on a bad port
    return url


def mqtt_topic() -> Rule:
    def ok(t: str) -> bool:
        return bool(t) and not any(c in t for c in "+#\0") and not t.startswith("/") and not t.endswith("/")

    return Rule("a non-empty MQTT topic without '+', '#' or a leading/trailing '/'", ok)


def secret_token() -> Rule:
    def ok(t: str) -> bool:
        return 16 <= len(t) <= 512 and t.isprintable() and not any(c.isspace() for c in t)

    return Rule("16-512 printable characters without whitespace", ok)


# --- checking one value ----------------------------------------------------------------------------

TYPE_NOUNS: Final = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def toml_type(v: object) -> str:
    names = {bool: "boolean", int: "integer", float: "float", str: "string", dict: "table", list: "array"}
    return names.get(type(v), "datetime")


def _show(v: object, secret: bool = False) -> str:
    if secret:
        return f"a {len(v)}-character string" if isinstance(v, str) else toml_type(v)
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def check_value(typ: type, rule: Rule | None, v: object, *, secret: bool = False) -> Any:
    """Type-check ``v`` (bool is not an int; an int is a float), then apply ``rule``. A secret value
    is never shown in the message."""
    shown = _show(v, secret=secret)  # as written: "got 0", not "got 0.0"
    if typ is float and type(v) is int:
        v = float(v)
    if type(v) is not typ:
        raise Invalid(f"must be {TYPE_NOUNS[typ]}, got {shown} ({toml_type(v)})")
    if isinstance(v, float) and not math.isfinite(v):
        raise Invalid(f"must be a finite number, got {v}")
    if rule is not None and not rule.ok(v):
        raise Invalid(f"must be {rule.what}, got {shown}")
    return v


_TRUE_WORDS: Final = frozenset({"true", "yes", "on", "1"})
_FALSE_WORDS: Final = frozenset({"false", "no", "off", "0"})


def parse_env_text(text: str, typ: type) -> object:
    """Turn an environment variable's text into a value of ``typ`` (then checked like a file value)."""
    s = text.strip()
    if typ is bool:
        if s.lower() not in _TRUE_WORDS | _FALSE_WORDS:
            raise Invalid(f"must be true/false, yes/no, on/off or 1/0, got {text!r}")
        return s.lower() in _TRUE_WORDS
    if typ is int or typ is float:
        try:
            return typ(s)
        except ValueError:
            raise Invalid(f"must be {TYPE_NOUNS[typ]}, got {text!r}") from None
    return text
