"""Loading the configuration: one TOML file plus ``COMPACTD_<SECTION>_<KEY>`` environment overrides.

Every key has a default (:mod:`watcher.config.schema`), so an empty file (or none at all) is a
valid configuration. Unknown keys and bad values are rejected with a :class:`ConfigError` that
says where the value came from::

    /etc/compactd/compactd.toml:12: compaction.reserve: must be a number in (0, 1), got 1.5
    $COMPACTD_MODEL_N_CTX: model.n_ctx: must be an integer, got 'big'
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from watcher.config.rules import Invalid, check_value, parse_env_text, toml_type
from watcher.config.schema import (
    AGENTS,
    MAX_AGENT_ID_LEN,
    RESTART_REQUIRED,
    SECTIONS,
    TABLE_KEYS,
    AgentOverride,
    Config,
)
from watcher.config.source import ConfigError, Source, Value, dotted, error, read_utf8, unknown
from watcher.config.spec import KeySpec

CONFIG_NAME: Final = "compactd.toml"
ETC_CONFIG: Final = Path("/etc/compactd") / CONFIG_NAME
ENV_PREFIX: Final = "COMPACTD_"
ENV_CONFIG: Final = "COMPACTD_CONFIG"

_Values = dict[str, dict[str, Value]]  # section -> key -> value


# --- reading the file and the environment ----------------------------------------------------------


def _read(path: Path) -> tuple[Source, dict[str, Any]]:
    text = read_utf8(path, ConfigError)
    src = Source(path, text)
    try:
        return src, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"at line (\d+)", str(exc))
        line = m[1] if m else src.last_line
        raise ConfigError(f"{path}:{line}: invalid TOML: {exc}") from exc


def _table(src: Source, path: tuple[str, ...], v: object) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise error(src.where(*path), dotted(path), f"must be a table, got {toml_type(v)}")
    return v


def _agent_id_ok(name: str) -> bool:
    return 0 < len(name) <= MAX_AGENT_ID_LEN and name.isprintable()


def _file_values(src: Source, raw: dict[str, Any]) -> tuple[_Values, _Values]:
    """Split a parsed file into section values and agent overrides, rejecting unknown names."""
    sections: _Values = {}
    agents: _Values = {}
    known_tables = [*SECTIONS, AGENTS]
    for name, body in raw.items():
        if name not in known_tables:
            raise error(src.where(name), dotted((name,)), unknown(name, known_tables, "table"))
        if name == AGENTS:
            for agent_id, override in _table(src, (AGENTS,), body).items():
                path = (AGENTS, agent_id)
                if not _agent_id_ok(agent_id):
                    msg = f"agent id must be 1-{MAX_AGENT_ID_LEN} printable characters"
                    raise error(src.where(*path), dotted(path), msg)
                agents[agent_id] = _collect(src, path, _table(src, path, override), AGENTS)
        else:
            sections[name] = _collect(src, (name,), _table(src, (name,), body), name)
    return sections, agents


def _collect(src: Source, path: tuple[str, ...], body: dict[str, Any], table: str) -> dict[str, Value]:
    known = list(TABLE_KEYS[table])
    for key in body:
        if key not in known:
            raise error(src.where(*path, key), dotted((*path, key)), unknown(key, known))
    return {key: Value(v, src.where(*path, key)) for key, v in body.items()}


def _env_values(env: Mapping[str, str]) -> tuple[_Values, tuple[str, ...]]:
    """``COMPACTD_<SECTION>_<KEY>`` variables and their names. Those naming no known section are
    not ours (a client's, say): ignored."""
    out: _Values = {}
    names: list[str] = []
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX) or var == ENV_CONFIG:
            continue
        section, _, key = var[len(ENV_PREFIX) :].lower().partition("_")
        where, name = f"${var}", f"{section}.{key}"
        if section == AGENTS:
            raise error(where, name, "[agents.*] can only be set in the config file")
        if section not in SECTIONS:
            continue
        specs = TABLE_KEYS[section]
        if key not in specs:
            raise error(where, name, unknown(key, list(specs)))
        try:
            out.setdefault(section, {})[key] = Value(parse_env_text(env[var], specs[key].type), where)
        except Invalid as exc:
            raise error(where, name, str(exc)) from None
        names.append(var)
    return out, tuple(names)


# --- building and cross-checking -------------------------------------------------------------------


def _check(spec: KeySpec, v: object) -> Any:
    return check_value(spec.type, spec.meta.rule, v, secret=spec.meta.secret)


def _build_one(table: str, key_prefix: str, values: dict[str, Value]) -> Any:
    specs = TABLE_KEYS[table]
    kwargs: dict[str, Any] = {}
    for key, val in values.items():
        try:
            kwargs[key] = _check(specs[key], val.value)
        except Invalid as exc:
            raise error(val.where, f"{key_prefix}.{key}", str(exc)) from None
    return (AgentOverride if table == AGENTS else SECTIONS[table])(**kwargs)


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
        raise error(where, key, f"must satisfy low_watermark < 1 - reserve, got {got}")
    if not m.max_tokens < m.n_ctx:
        key, where = _blame(origins, "model.max_tokens", "model.n_ctx")
        raise error(where, key, f"must satisfy max_tokens < n_ctx, got {m.max_tokens} >= {m.n_ctx}")
    if m.backend == "openai" and not m.url:
        key, where = _blame(origins, "model.url", "model.backend")
        raise error(where, key, 'must be set when backend = "openai"')
    if bool(d.curve_secret_key_file) != bool(d.curve_allowed_keys_dir):
        key, where = _blame(origins, "daemon.curve_secret_key_file", "daemon.curve_allowed_keys_dir")
        raise error(where, key, "curve_secret_key_file and curve_allowed_keys_dir must be set together")
    if not d.heartbeat_s < d.agent_timeout_s:
        key, where = _blame(origins, "daemon.heartbeat_s", "daemon.agent_timeout_s")
        got = f"{d.heartbeat_s:g} >= {d.agent_timeout_s:g}"
        raise error(where, key, f"must satisfy heartbeat_s < agent_timeout_s, got {got}")
    tokens: dict[str, str] = {}
    for agent_id, o in cfg.agents.items():
        prefix = dotted((AGENTS, agent_id))
        if o.reserve is not None and c.low_watermark and not c.low_watermark < 1 - o.reserve:
            got = f"compaction.low_watermark = {c.low_watermark:g}, reserve = {o.reserve:g}"
            msg = f"must satisfy compaction.low_watermark < 1 - reserve, got {got}"
            raise error(origins.get(f"{prefix}.reserve", ""), f"{prefix}.reserve", msg)
        if o.token is not None:
            if o.token in tokens:
                where = origins.get(f"{prefix}.token", "")
                raise error(where, f"{prefix}.token", f"same as {tokens[o.token]}")
            tokens[o.token] = f"{prefix}.token"


def _build(sections: _Values, agents: _Values, source: str, env_overrides: tuple[str, ...]) -> Config:
    built = {name: _build_one(name, name, sections.get(name, {})) for name in SECTIONS}
    overrides = {a: _build_one(AGENTS, dotted((AGENTS, a)), v) for a, v in agents.items()}
    cfg = Config(**built, agents=overrides, source=source, env_overrides=env_overrides)
    origins = {f"{s}.{k}": v.where for s, vals in sections.items() for k, v in vals.items()}
    for a, vals in agents.items():
        origins |= {f"{dotted((AGENTS, a))}.{k}": v.where for k, v in vals.items()}
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
        for name in SECTIONS
        for key in TABLE_KEYS[name]
        if getattr(getattr(old, name), key) != getattr(getattr(new, name), key)
    ]
    for agent_id in sorted(old.agents.keys() | new.agents.keys()):
        if old.agents.get(agent_id) != new.agents.get(agent_id):
            out.append(dotted((AGENTS, agent_id)))
    return out


def diff_restart_required(old: Config, new: Config) -> list[str]:
    """The keys in :data:`RESTART_REQUIRED` that differ between ``old`` and ``new``."""
    return [k for k in changed_keys(old, new) if k in RESTART_REQUIRED]
