"""Shared inputs of the configuration tests: a full file, tokens, and small helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from watcher.config.settings import (
    Config,
    ConfigError,
    load,
    load_effective,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "compactd.example.toml"
TOKEN_A = "a" * 24
TOKEN_B = "b" * 24

FULL = f"""\
[daemon]
socket = "ipc:///run/compactd/sock"
state_dir = "/var/lib/compactd"
max_frame_bytes = 1048576
heartbeat_s = 2
agent_timeout_s = 30.5
log_level = "debug"
log_format = "json"

[model]
path = "/srv/models/m.gguf"
enabled = false
n_ctx = 4096
n_threads = 3
n_batch = 256
score_rows = 96
max_tokens = 200
timeout_s = 15
weights = "f32"
cache_dir = "/var/cache/compactd-test"

[compaction]
reserve = 0.2
low_watermark = 0.5
policy = "manual"
planner = "recency"
fresh_turns = 0
default_budget = 8000

[metrics]
listen = "127.0.0.1:9464"

[mqtt]
url = "mqtt://broker.lan:1884"
topic_prefix = "site/compactd"
qos = 2

[store]
retention_days = 0
max_archive_mb = 64
synchronous = "full"

[agents.planner-bot]
budget = 128000
reserve = 0.1
policy = "off"
planner = "optimistic"
token = "{TOKEN_A}"

[agents."ci bot"]
token = "{TOKEN_B}"
"""


def write(tmp_path: Path, text: str, name: str = "compactd.toml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load(path)
    return str(info.value)


def effective(tmp_path: Path, env: dict[str, str], explicit: Path | None = None) -> Config:
    env = {"HOME": str(tmp_path / "home"), **env}
    return load_effective(None if explicit is None else str(explicit), env, etc_path=tmp_path / "no-etc")
