"""watcher.config: COMPACTD_* environment overrides and the lookup order of the config file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.watcher.config.cases import TOKEN_A, effective, write
from watcher.config.settings import (
    CompactionConfig,
    Config,
    ConfigError,
    ModelConfig,
    find_config_path,
    load,
    load_effective,
)

# --- environment overrides -------------------------------------------------------------------------


def test_env_overrides_apply_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[compaction]\nreserve = 0.3\npolicy = 'manual'\n[model]\nenabled = true\n")
    cfg = effective(
        tmp_path,
        {
            "COMPACTD_COMPACTION_RESERVE": "0.2",
            "COMPACTD_MODEL_PATH": "/srv/m.gguf",
            "COMPACTD_MODEL_ENABLED": "off",
            "COMPACTD_MODEL_N_CTX": " 4096 ",
            "COMPACTD_DAEMON_HEARTBEAT_S": "3",
            "COMPACTD_MQTT_URL": "mqtt://localhost",
            "COMPACTD_CONFIG_UNUSED": "x",  # no section "config": not ours
            "COMPACTD_TOKEN": "x",  # a client-side variable: ignored
            "UNRELATED": "1",
        },
        explicit=path,
    )
    assert cfg.source == str(path)
    assert cfg.compaction == CompactionConfig(reserve=0.2, policy="manual")
    assert cfg.model == ModelConfig(path="/srv/m.gguf", enabled=False, n_ctx=4096)
    assert cfg.daemon.heartbeat_s == 3.0
    assert cfg.mqtt.url == "mqtt://localhost"
    assert cfg.env_overrides == (
        "COMPACTD_COMPACTION_RESERVE",
        "COMPACTD_DAEMON_HEARTBEAT_S",
        "COMPACTD_MODEL_ENABLED",
        "COMPACTD_MODEL_N_CTX",
        "COMPACTD_MODEL_PATH",
        "COMPACTD_MQTT_URL",
    )


def test_env_overrides_without_a_file(tmp_path: Path) -> None:
    cfg = effective(tmp_path, {"COMPACTD_STORE_SYNCHRONOUS": "full", "COMPACTD_METRICS_LISTEN": "[::1]:9464"})
    assert cfg.source == ""
    assert cfg.store.synchronous == "full"
    assert cfg.metrics.listen == "[::1]:9464"


@pytest.mark.parametrize(
    ("var", "value", "key", "fragment"),
    [
        ("COMPACTD_MODEL_N_CTX", "big", "model.n_ctx", "must be an integer, got 'big'"),
        ("COMPACTD_MODEL_N_CTX", "1.5", "model.n_ctx", "must be an integer, got '1.5'"),
        ("COMPACTD_MODEL_N_CTX", "100", "model.n_ctx", "must be an integer >= 256, got 100"),
        ("COMPACTD_COMPACTION_RESERVE", "1.5", "compaction.reserve", "must be a number in (0, 1), got 1.5"),
        ("COMPACTD_COMPACTION_RESERVE", "", "compaction.reserve", "must be a number, got ''"),
        ("COMPACTD_COMPACTION_RESERVE", "inf", "compaction.reserve", "must be a finite number"),
        ("COMPACTD_MODEL_ENABLED", "maybe", "model.enabled", "true/false, yes/no, on/off or 1/0"),
        ("COMPACTD_DAEMON_LOG_LEVEL", "loud", "daemon.log_level", "one of 'debug'"),
        ("COMPACTD_MODEL_PATHH", "/x", "model.pathh", "unknown key (did you mean 'path'?)"),
        ("COMPACTD_COMPACTION_LOW_WATERMARK", "0.95", "compaction.low_watermark", "< 1 - reserve"),
        ("COMPACTD_AGENTS_BOT_TOKEN", TOKEN_A, "agents.bot_token", "can only be set in the config file"),
        ("COMPACTD_MODEL_WEIGHTS", "q8", "model.weights", "one of 'shipped', 'q8_0'"),
        ("COMPACTD_MODEL_CACHE_DIR", "var/cache", "model.cache_dir", "an absolute path, got 'var/cache'"),
    ],
)
def test_env_errors_name_the_variable(tmp_path: Path, var: str, value: str, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        effective(tmp_path, {var: value})
    message = str(info.value)
    assert message.startswith(f"${var}: {key}: "), message
    assert fragment in message


def test_env_lowercase_variable_names_are_accepted(tmp_path: Path) -> None:
    assert effective(tmp_path, {"COMPACTD_model_n_ctx": "512"}).model.n_ctx == 512


def test_load_ignores_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTD_COMPACTION_RESERVE", "0.3")
    assert load(None).compaction.reserve == 0.15
    path = write(tmp_path, "")
    assert load(path).compaction.reserve == 0.15


# --- lookup order ----------------------------------------------------------------------------------


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    """One config file at every place find_config_path looks, each with a different budget."""
    paths = {
        "explicit": tmp_path / "explicit.toml",
        "env": tmp_path / "env.toml",
        "confdir": tmp_path / "confdir" / "compactd.toml",
        "etc": tmp_path / "etc" / "compactd.toml",
        "xdg": tmp_path / "xdg" / "compactd" / "compactd.toml",
    }
    for i, path in enumerate(paths.values()):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"[compaction]\ndefault_budget = {1000 + i}\n", encoding="utf-8")
    return paths


def test_lookup_order(tmp_path: Path, places: dict[str, Path]) -> None:
    env = {
        "COMPACTD_CONFIG": str(places["env"]),
        "CONFIGURATION_DIRECTORY": str(places["confdir"].parent),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "HOME": str(tmp_path / "home"),
    }
    etc = places["etc"]
    assert find_config_path(str(places["explicit"]), env, etc_path=etc) == places["explicit"]
    assert find_config_path(None, env, etc_path=etc) == places["env"]
    del env["COMPACTD_CONFIG"]
    assert find_config_path(None, env, etc_path=etc) == places["confdir"]
    places["confdir"].unlink()
    assert find_config_path(None, env, etc_path=etc) == places["etc"]
    etc.unlink()
    assert find_config_path(None, env, etc_path=etc) == places["xdg"]
    places["xdg"].unlink()
    assert find_config_path(None, env, etc_path=etc) is None


def test_lookup_uses_os_environ_by_default(
    tmp_path: Path, places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("COMPACTD_CONFIG", "CONFIGURATION_DIRECTORY", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    write(home, "[compaction]\ndefault_budget = 5555\n", ".config/compactd/compactd.toml")
    monkeypatch.setenv("HOME", str(home))
    missing_etc = tmp_path / "no-etc"
    assert find_config_path(None, etc_path=missing_etc) == home / ".config/compactd/compactd.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert find_config_path(None, etc_path=missing_etc) == places["xdg"]
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # ignored, as the XDG spec says
    assert find_config_path(None, etc_path=missing_etc) == home / ".config/compactd/compactd.toml"
    monkeypatch.setenv("COMPACTD_CONFIG", str(places["env"]))
    monkeypatch.setenv("COMPACTD_COMPACTION_RESERVE", "0.25")
    cfg = load_effective(None, etc_path=missing_etc)
    assert (cfg.source, cfg.compaction.default_budget, cfg.compaction.reserve) == (
        str(places["env"]),
        1001,
        0.25,
    )


def test_configuration_directory_may_list_several(tmp_path: Path, places: dict[str, Path]) -> None:
    env = {
        "CONFIGURATION_DIRECTORY": f"{tmp_path / 'empty'}::{places['confdir'].parent}",
        "HOME": str(tmp_path),
    }
    assert find_config_path(None, env, etc_path=places["etc"]) == places["confdir"]


def test_explicit_and_env_paths_must_exist(tmp_path: Path, places: dict[str, Path]) -> None:
    env = {"HOME": str(tmp_path)}
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(missing))}: --config: no such file$"):
        find_config_path(str(missing), env, etc_path=places["etc"])
    with pytest.raises(ConfigError, match=r": --config: is a directory$"):
        find_config_path(str(tmp_path), env, etc_path=places["etc"])
    env["COMPACTD_CONFIG"] = str(missing)
    with pytest.raises(ConfigError, match=r": \$COMPACTD_CONFIG: no such file$"):
        load_effective(None, env, etc_path=places["etc"])
    # --config wins, so a missing $COMPACTD_CONFIG is not looked at; an empty one counts as unset
    assert find_config_path(str(places["explicit"]), env) == places["explicit"]
    env["COMPACTD_CONFIG"] = ""
    assert find_config_path(None, env, etc_path=places["etc"]) == places["etc"]


def test_no_file_anywhere_gives_defaults(tmp_path: Path) -> None:
    assert effective(tmp_path, {}) == Config()
