"""compactd's configuration, the public face of :mod:`watcher.config`: import from here.

- :mod:`watcher.config.schema`: every key, written once (type, default, rule, reload class, doc);
- :mod:`watcher.config.rules`: value rules and their messages;
- :mod:`watcher.config.loading`: the TOML file, ``COMPACTD_<SECTION>_<KEY>`` overrides, the lookup
  order and reload diffs;
- :mod:`watcher.config.agents`: per-agent resolution;
- :mod:`watcher.config.docs`: the README table and docs/compactd.example.toml, generated.
"""

from __future__ import annotations

from summarizer.weights import FORMATS as WEIGHT_FORMATS
from watcher.config.agents import (
    AUTO_BAND,
    AUTO_LOW,
    AUTO_LOW_FLOOR,
    AUTO_LOW_TOP,
    ResolvedAgent,
    low_ratio,
    resolve_agent,
)
from watcher.config.loading import (
    CONFIG_NAME,
    ENV_CONFIG,
    ENV_PREFIX,
    ETC_CONFIG,
    changed_keys,
    diff_restart_required,
    env_path,
    find_config_path,
    load,
    load_effective,
)
from watcher.config.rules import parse_listen, parse_mqtt_url
from watcher.config.schema import (
    ENGINE_KEYS,
    LOG_FORMATS,
    LOG_LEVELS,
    MAX_AGENT_ID_LEN,
    MAX_BUDGET,
    PLANNERS,
    POLICIES,
    RELEVANCE_METHODS,
    REQUESTABLE_PLANNERS,
    RESTART_REQUIRED,
    SYNCHRONOUS,
    AgentOverride,
    CompactionConfig,
    Config,
    DaemonConfig,
    MetricsConfig,
    ModelConfig,
    MqttConfig,
    StoreConfig,
)
from watcher.config.source import ConfigError
from watcher.config.spec import Reload

__all__ = [
    "AUTO_BAND",
    "AUTO_LOW",
    "AUTO_LOW_FLOOR",
    "AUTO_LOW_TOP",
    "CONFIG_NAME",
    "ENGINE_KEYS",
    "ENV_CONFIG",
    "ENV_PREFIX",
    "ETC_CONFIG",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MAX_AGENT_ID_LEN",
    "MAX_BUDGET",
    "PLANNERS",
    "POLICIES",
    "RELEVANCE_METHODS",
    "REQUESTABLE_PLANNERS",
    "RESTART_REQUIRED",
    "SYNCHRONOUS",
    "WEIGHT_FORMATS",
    "AgentOverride",
    "CompactionConfig",
    "Config",
    "ConfigError",
    "DaemonConfig",
    "MetricsConfig",
    "ModelConfig",
    "MqttConfig",
    "Reload",
    "ResolvedAgent",
    "StoreConfig",
    "changed_keys",
    "diff_restart_required",
    "env_path",
    "find_config_path",
    "load",
    "load_effective",
    "low_ratio",
    "parse_listen",
    "parse_mqtt_url",
    "resolve_agent",
]
