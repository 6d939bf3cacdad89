"""watcher.config: defaults, validation with file:line: key messages, env overrides, lookup, reload diffs."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from watcher.config import (
    RESTART_REQUIRED,
    WEIGHT_FORMATS,
    AgentOverride,
    CompactionConfig,
    Config,
    ConfigError,
    DaemonConfig,
    MetricsConfig,
    ModelConfig,
    MqttConfig,
    ResolvedAgent,
    StoreConfig,
    changed_keys,
    diff_restart_required,
    find_config_path,
    load,
    load_effective,
    low_ratio,
    parse_listen,
    parse_mqtt_url,
    resolve_agent,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "compactd.example.toml"
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


# --- defaults and a full file ----------------------------------------------------------------------


def test_defaults() -> None:
    cfg = load(None)
    assert cfg == Config()
    assert cfg.source == ""
    assert cfg.env_overrides == ()
    assert cfg.agents == {}
    assert cfg.daemon.max_frame_bytes == 16 * 1024 * 1024
    assert cfg.compaction.reserve == 0.15
    assert cfg.metrics.listen == ""
    assert cfg.mqtt == MqttConfig(url="", topic_prefix="compactd/v1", qos=1)
    assert cfg.store == StoreConfig(retention_days=30, max_archive_mb=1024, synchronous="normal")


def test_empty_file_is_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "# nothing\n")
    assert load(path) == Config(source=str(path))
    assert load(str(path)) == Config(source=str(path))


def test_full_file_round_trips(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    expected = Config(
        daemon=DaemonConfig(
            socket="ipc:///run/compactd/sock",
            state_dir="/var/lib/compactd",
            max_frame_bytes=1048576,
            heartbeat_s=2.0,
            agent_timeout_s=30.5,
            log_level="debug",
            log_format="json",
        ),
        model=ModelConfig(
            path="/srv/models/m.gguf",
            enabled=False,
            n_ctx=4096,
            n_threads=3,
            n_batch=256,
            max_tokens=200,
            timeout_s=15.0,
            weights="f32",
            cache_dir="/var/cache/compactd-test",
        ),
        compaction=CompactionConfig(
            reserve=0.2,
            low_watermark=0.5,
            policy="manual",
            planner="recency",
            fresh_turns=0,
            default_budget=8000,
        ),
        agents={
            "planner-bot": AgentOverride(
                budget=128000, reserve=0.1, policy="off", planner="optimistic", token=TOKEN_A
            ),
            "ci bot": AgentOverride(token=TOKEN_B),
        },
        source=str(path),
        metrics=MetricsConfig(listen="127.0.0.1:9464"),
        mqtt=MqttConfig(url="mqtt://broker.lan:1884", topic_prefix="site/compactd", qos=2),
        store=StoreConfig(retention_days=0, max_archive_mb=64, synchronous="full"),
    )
    cfg = load(path)
    assert cfg == expected
    # ints are accepted where numbers are expected, and stored as floats
    assert type(cfg.daemon.heartbeat_s) is float
    assert type(cfg.model.timeout_s) is float


def test_config_is_frozen_and_hides_tokens(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, FULL))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.compaction.reserve = 0.3  # type: ignore[misc]
    assert TOKEN_A not in repr(cfg)
    assert TOKEN_A not in repr(cfg.agents["planner-bot"])


@pytest.mark.parametrize("weights", ["", "shipped", *WEIGHT_FORMATS])
def test_model_weights_accepts_every_format(tmp_path: Path, weights: str) -> None:
    cfg = load(write(tmp_path, f'[model]\nweights = "{weights}"\ncache_dir = "/var/cache/c"\n'))
    assert (cfg.model.weights, cfg.model.cache_dir) == (weights, "/var/cache/c")
    env = {"COMPACTD_MODEL_WEIGHTS": weights, "COMPACTD_MODEL_CACHE_DIR": str(tmp_path)}
    assert effective(tmp_path, env).model == ModelConfig(weights=weights, cache_dir=str(tmp_path))


def test_model_weights_formats_are_the_engines() -> None:
    from summarizer.weights import FORMATS, normalize

    assert WEIGHT_FORMATS == FORMATS
    assert ModelConfig().weights in ("", "shipped", *FORMATS)
    assert normalize("shipped") == normalize("") == ""
    assert [normalize(f) for f in FORMATS] == list(FORMATS)


def test_dotted_and_inline_forms_are_accepted(tmp_path: Path) -> None:
    text = "compaction.reserve = 0.25\nmodel = { n_ctx = 1024 }\nagents.bot.budget = 5000\n"
    cfg = load(write(tmp_path, text))
    assert cfg.compaction.reserve == 0.25
    assert cfg.model.n_ctx == 1024
    assert cfg.agents == {"bot": AgentOverride(budget=5000)}


# --- errors: path, line and dotted key -------------------------------------------------------------

ERRORS = [
    # unknown key in a table, with a suggestion
    ("[daemon]\nsocket = 'x'\nsockett = 'y'\n", 3, "daemon.sockett", "unknown key (did you mean 'socket'?)"),
    ("[model]\nzzz = 1\n", 2, "model.zzz", "unknown key (known: path, enabled, required, n_ctx"),
    # unknown table
    ("[daemon]\n\n[modle]\npath = ''\n", 3, "modle", "unknown table (did you mean 'model'?)"),
    ("top_level = 1\n", 1, "top_level", "unknown table"),
    ("daemon = 5\n", 1, "daemon", "must be a table, got integer"),
    # wrong type
    ('[model]\nn_ctx = "big"\n', 2, "model.n_ctx", "must be an integer, got 'big' (string)"),
    ("[model]\nn_threads = true\n", 2, "model.n_threads", "must be an integer, got True (boolean)"),
    ("[model]\nn_ctx = 4096.0\n", 2, "model.n_ctx", "must be an integer, got 4096.0 (float)"),
    ('[model]\nenabled = "yes"\n', 2, "model.enabled", "must be true or false, got 'yes' (string)"),
    ("[model]\nenabled = 1\n", 2, "model.enabled", "must be true or false, got 1 (integer)"),
    ("[compaction]\nreserve = false\n", 2, "compaction.reserve", "must be a number, got False (boolean)"),
    ("[daemon]\nsocket = 5\n", 2, "daemon.socket", "must be a string, got 5 (integer)"),
    ("[daemon]\nsocket = [1, 2]\n", 2, "daemon.socket", "must be a string, got [1, 2] (array)"),
    ("[daemon]\nstate_dir = 1979-05-27\n", 2, "daemon.state_dir", "(datetime)"),
    # out of range
    ("\n[compaction]\nreserve = 1.5\n", 3, "compaction.reserve", "must be a number in (0, 1), got 1.5"),
    ("[compaction]\nreserve = 0\n", 2, "compaction.reserve", "must be a number in (0, 1), got 0"),
    ("[compaction]\nreserve = nan\n", 2, "compaction.reserve", "must be a finite number, got nan"),
    ("[compaction]\nlow_watermark = 1\n", 2, "compaction.low_watermark", "in (0, 1), got 1"),
    ("[compaction]\nfresh_turns = -1\n", 2, "compaction.fresh_turns", "must be an integer >= 0, got -1"),
    ("[compaction]\ndefault_budget = 999\n", 2, "compaction.default_budget", "in [1000, 100000000], got 999"),
    ("[daemon]\nmax_frame_bytes = 1023\n", 2, "daemon.max_frame_bytes", "in [1024, 1073741824], got 1023"),
    ("[daemon]\nmax_frame_bytes = 1073741825\n", 2, "daemon.max_frame_bytes", "got 1073741825"),
    ("[daemon]\nheartbeat_s = 0\n", 2, "daemon.heartbeat_s", "must be a number > 0, got 0"),
    ("[daemon]\nagent_timeout_s = -1\n", 2, "daemon.agent_timeout_s", "must be a number > 0, got -1"),
    ("[model]\ntimeout_s = 0.0\n", 2, "model.timeout_s", "must be a number > 0"),
    ("[model]\nn_ctx = 255\n", 2, "model.n_ctx", "must be an integer >= 256, got 255"),
    ("[model]\nn_threads = -1\n", 2, "model.n_threads", "must be an integer >= 0, got -1"),
    ("[model]\nn_batch = 0\n", 2, "model.n_batch", "must be an integer >= 1, got 0"),
    ("[model]\nmax_tokens = 7\n", 2, "model.max_tokens", "must be an integer >= 8, got 7"),
    ('[model]\nweights = "q3_k"\n', 2, "model.weights", "one of 'shipped', 'q8_0', 'q4_0', 'f16', 'bf16'"),
    ('[model]\nweights = "Q8_0"\n', 2, "model.weights", "got 'Q8_0'"),
    ("[model]\nweights = 8\n", 2, "model.weights", "must be a string, got 8 (integer)"),
    (
        '\n[model]\ncache_dir = "cache"\n',
        3,
        "model.cache_dir",
        "'' (the default cache directory) or an absolute",
    ),
    ('[model]\ncache_dir = "~/.cache"\n', 2, "model.cache_dir", "an absolute path, got '~/.cache'"),
    ("[store]\nretention_days = -1\n", 2, "store.retention_days", ">= 0"),
    ("[store]\nmax_archive_mb = -5\n", 2, "store.max_archive_mb", ">= 0"),
    # bad enums and formats
    (
        '[daemon]\nlog_level = "verbose"\n',
        2,
        "daemon.log_level",
        "one of 'debug', 'info', 'warning', 'error'",
    ),
    ('[daemon]\nlog_level = "INFO"\n', 2, "daemon.log_level", "got 'INFO'"),
    ('[daemon]\nlog_format = "text"\n', 2, "daemon.log_format", "one of 'auto', 'json', 'console'"),
    ('[compaction]\npolicy = "always"\n', 2, "compaction.policy", "one of 'auto', 'manual', 'off'"),
    ('[compaction]\nplanner = "lru"\n', 2, "compaction.planner", "one of 'optimistic', 'recency'"),
    ('[store]\nsynchronous = "fast"\n', 2, "store.synchronous", "one of 'off', 'normal', 'full', 'extra'"),
    ("[mqtt]\nqos = 3\n", 2, "mqtt.qos", "one of 0, 1, 2, got 3"),
    ('[metrics]\nlisten = "9464"\n', 2, "metrics.listen", "'' (off) or 'HOST:PORT', got '9464'"),
    ('[metrics]\nlisten = "localhost:70000"\n', 2, "metrics.listen", "HOST:PORT"),
    ('[metrics]\nlisten = "::1:9464"\n', 2, "metrics.listen", "HOST:PORT"),
    ('[mqtt]\nurl = "http://broker:1883"\n', 2, "mqtt.url", "'mqtt://HOST[:PORT]'"),
    ('[mqtt]\nurl = "mqtt://user:pw@broker"\n', 2, "mqtt.url", "'mqtt://HOST[:PORT]'"),
    ('[mqtt]\nurl = "mqtt://broker:99999"\n', 2, "mqtt.url", "'mqtt://HOST[:PORT]'"),
    ('[mqtt]\ntopic_prefix = "a/#"\n', 2, "mqtt.topic_prefix", "without '+', '#'"),
    ('[mqtt]\ntopic_prefix = ""\n', 2, "mqtt.topic_prefix", "non-empty"),
    ('[mqtt]\ntopic_prefix = "compactd/"\n', 2, "mqtt.topic_prefix", "leading/trailing '/'"),
    # constraints between keys: the key that was set is blamed
    ("[compaction]\nlow_watermark = 0.9\n", 2, "compaction.low_watermark", "low_watermark < 1 - reserve"),
    (
        "[compaction]\nlow_watermark = 0.6\nreserve = 0.5\n",
        2,
        "compaction.low_watermark",
        "got low_watermark = 0.6",
    ),
    ("[model]\nmax_tokens = 4096\n", 2, "model.max_tokens", "max_tokens < n_ctx, got 4096 >= 2048"),
    ("[model]\nmax_tokens = 300\nn_ctx = 256\n", 2, "model.max_tokens", "got 300 >= 256"),
    (
        "[daemon]\nheartbeat_s = 120\n",
        2,
        "daemon.heartbeat_s",
        "heartbeat_s < agent_timeout_s, got 120 >= 120",
    ),
    ("[daemon]\nagent_timeout_s = 5\n", 2, "daemon.agent_timeout_s", "heartbeat_s < agent_timeout_s"),
    # keys written as dotted keys or inline tables
    ("compaction.reserve = 2.0\n", 1, "compaction.reserve", "in (0, 1)"),
    ("[compaction]\nreserve . x = 1\n", 2, "compaction.reserve", "must be a number, got {'x': 1} (table)"),
    ("\ncompaction = { reserve = 2.0 }\n", 2, "compaction.reserve", "in (0, 1)"),
    # a key-like line inside a multi-line string is not a key
    (
        '[daemon]\nsocket = """\n[compaction]\nreserve = 1\n"""\n[compaction]\nreserve = 2.0\n',
        7,
        "compaction.reserve",
        "2.0",
    ),
    # bad agent overrides
    ("[agents.bot]\nbudjet = 5000\n", 2, "agents.bot.budjet", "unknown key (did you mean 'budget'?)"),
    ("[agents.bot]\nbudget = 500\n", 2, "agents.bot.budget", "in [1000, 100000000], got 500"),
    ('[agents."ci bot"]\nbudget = true\n', 2, 'agents."ci bot".budget', "must be an integer"),
    ("[agents.bot]\nreserve = 1.0\n", 2, "agents.bot.reserve", "in (0, 1)"),
    (
        "[compaction]\nlow_watermark = 0.6\n[agents.bot]\nreserve = 0.5\n",
        4,
        "agents.bot.reserve",
        "compaction.low_watermark < 1 - reserve",
    ),
    ('[agents.bot]\npolicy = "sometimes"\n', 2, "agents.bot.policy", "one of 'auto', 'manual', 'off'"),
    ('[agents.bot]\nplanner = "lru"\n', 2, "agents.bot.planner", "one of 'optimistic', 'recency'"),
    ('[agents.bot]\ntoken = ""\n', 2, "agents.bot.token", "got a 0-character string"),
    ('[agents.bot]\ntoken = "has a space in it ok"\n', 2, "agents.bot.token", "without whitespace"),
    ("[agents.bot]\ntoken = 12345678901234567\n", 2, "agents.bot.token", "must be a string, got integer"),
    (
        f'[agents.a]\ntoken = "{TOKEN_A}"\n\n[agents.b]\ntoken = "{TOKEN_A}"\n',
        5,
        "agents.b.token",
        "same as agents.a.token",
    ),
    ("[agents]\nbot = 5\n", 2, "agents.bot", "must be a table, got integer"),
    ("agents = 5\n", 1, "agents", "must be a table, got integer"),
    ('[agents.""]\nbudget = 5000\n', 1, 'agents.""', "agent id must be 1-128 printable characters"),
    ('[model]\nbackend = "vllm"\n', 2, "model.backend", "must be one of 'local', 'openai'"),
    ('[model]\nurl = "ftp://box/v1"\n', 2, "model.url", "http[s]://HOST[:PORT][/PATH]"),
    ('[model]\nurl = "http://box:99999/v1"\n', 2, "model.url", "http[s]://HOST[:PORT][/PATH]"),
    ('[model]\nbackend = "openai"\n', 2, "model.backend", 'must be set when backend = "openai"'),
    ('[model]\napi_key_file = "key"\n', 2, "model.api_key_file", "an absolute path"),
    ("[model]\nretries = 11\n", 2, "model.retries", "in [0, 10]"),
    ("[model]\nrequest_timeout_s = 0.0\n", 2, "model.request_timeout_s", "must be a number > 0"),
]


def test_remote_backend_keys(tmp_path: Path) -> None:
    text = '[model]\nbackend = "openai"\nurl = "http://127.0.0.1:8000/v1"\napi_key_file = "/etc/k"\n'
    m = load(write(tmp_path, text)).model
    assert (m.backend, m.url, m.api_key_file, m.retries) == (
        "openai",
        "http://127.0.0.1:8000/v1",
        "/etc/k",
        2,
    )
    assert load(write(tmp_path, "")).model.backend == "local"


@pytest.mark.parametrize(("text", "line", "key", "fragment"), ERRORS)
def test_error_names_path_line_and_key(tmp_path: Path, text: str, line: int, key: str, fragment: str) -> None:
    path = write(tmp_path, text)
    message = load_error(path)
    assert message.startswith(f"{path}:{line}: {key}: "), message
    assert fragment in message


def test_token_is_never_echoed(tmp_path: Path) -> None:
    secret = "short-secret"
    message = load_error(write(tmp_path, f'[agents.bot]\ntoken = "{secret}"\n'))
    assert secret not in message
    assert "16-512 printable characters" in message
    message = load_error(
        write(tmp_path, f'[agents.a]\ntoken = "{TOKEN_A}"\n[agents.b]\ntoken = "{TOKEN_A}"\n')
    )
    assert TOKEN_A not in message


def test_line_is_omitted_when_not_found(tmp_path: Path) -> None:
    # "\u0064aemon" is "daemon" once decoded; the line scan does not decode escapes
    path = write(tmp_path, '"\\u0064aemon" = 5\n')
    assert load_error(path) == f"{path}: daemon: must be a table, got integer"


def test_syntax_error_has_path_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[daemon]\nsocket = \nlog_level = 'info'\n")
    message = load_error(path)
    assert message.startswith(f"{path}:2: invalid TOML: ")
    assert "line 2" in message


def test_syntax_error_at_end_of_document(tmp_path: Path) -> None:
    path = write(tmp_path, "[daemon]\n\nsocket = ")
    assert load_error(path).startswith(f"{path}:3: invalid TOML: ")


def test_duplicate_table_is_a_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[daemon]\n[model]\n[daemon]\n")
    assert load_error(path).startswith(f"{path}:3: invalid TOML: ")


def test_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    assert load_error(missing).startswith(f"{missing}: cannot read: ")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"[daemon]\nsocket = '\xff'\n")
    assert load_error(binary).startswith(f"{binary}: not UTF-8 text")


# --- environment overrides -------------------------------------------------------------------------


def effective(tmp_path: Path, env: dict[str, str], explicit: Path | None = None) -> Config:
    env = {"HOME": str(tmp_path / "home"), **env}
    return load_effective(None if explicit is None else str(explicit), env, etc_path=tmp_path / "no-etc")


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


# --- the documented example ------------------------------------------------------------------------


def test_example_loads_and_equals_the_defaults() -> None:
    assert load(EXAMPLE) == Config(source=str(EXAMPLE))


def test_example_documents_every_key() -> None:
    raw = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    sections = {"daemon", "model", "compaction", "metrics", "mqtt", "store"}
    assert set(raw) == sections
    text = EXAMPLE.read_text(encoding="utf-8")
    unset_by_default = {"low_watermark"}  # documented commented out: its default is "unset" (auto)
    for name in sections:
        fields = {f.name for f in dataclasses.fields(getattr(Config(), name))}
        assert set(raw[name]) == fields - unset_by_default, name
    assert "# low_watermark = " in text
    for f in dataclasses.fields(AgentOverride):
        assert f"# {f.name} = " in text, f.name


def test_example_agent_block_is_valid_once_uncommented(tmp_path: Path) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    block = text[text.index("# [agents.planner-bot]") :]
    uncommented = "\n".join(line.removeprefix("# ") for line in block.splitlines())
    cfg = load(write(tmp_path, text + uncommented))
    assert cfg.agents == {
        "planner-bot": AgentOverride(
            budget=128000,
            reserve=0.1,
            policy="manual",
            planner="recency",
            token="replace-with-a-long-random-secret",
        )
    }


@pytest.mark.parametrize("key", sorted(RESTART_REQUIRED))
def test_example_marks_restart_keys(key: str) -> None:
    section, name = key.split(".")
    text = EXAMPLE.read_text(encoding="utf-8")
    body = text[text.index(f"[{section}]") :]
    comment = body[: body.index(f"\n{name} = ")]
    assert comment.rstrip().endswith("restart"), key


# --- reload ----------------------------------------------------------------------------------------


def test_restart_required_keys_exist() -> None:
    cfg = Config()
    for key in RESTART_REQUIRED:
        section, name = key.split(".")
        assert hasattr(getattr(cfg, section), name)


def test_diff_restart_required(tmp_path: Path) -> None:
    old = load(None)
    assert diff_restart_required(old, old) == []
    assert diff_restart_required(old, load(write(tmp_path, FULL))) == [
        "daemon.socket",
        "daemon.state_dir",
        "daemon.max_frame_bytes",
        "model.n_ctx",
        "model.n_threads",
        "model.weights",
        "model.cache_dir",
        "metrics.listen",
        "store.synchronous",
    ]
    reloadable = dataclasses.replace(
        old,
        compaction=CompactionConfig(reserve=0.3),
        model=ModelConfig(path="/m.gguf"),
        agents={"bot": AgentOverride(budget=5000)},
    )
    assert diff_restart_required(old, reloadable) == []
    assert changed_keys(old, reloadable) == ["model.path", "compaction.reserve", "agents.bot"]
    assert changed_keys(reloadable, old) == ["model.path", "compaction.reserve", "agents.bot"]


# --- per-agent resolution --------------------------------------------------------------------------


def test_resolve_agent_defaults() -> None:
    got = resolve_agent(Config(), "anyone")
    assert got == ResolvedAgent(
        budget=32000, reserve=0.15, policy="auto", planner="optimistic", low_watermark=0.7
    )
    assert got.high_water_tokens == 27200
    assert got.low_water_tokens == 22400


def test_resolve_agent_requests_win_over_defaults() -> None:
    got = resolve_agent(
        Config(), "a", requested_budget=8000, requested_reserve=0.25, requested_policy="manual"
    )
    assert (got.budget, got.reserve, got.policy) == (8000, 0.25, "manual")


def test_resolve_agent_config_overrides_win_over_requests(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, FULL))
    got = resolve_agent(
        cfg, "planner-bot", requested_budget=8000, requested_reserve=0.3, requested_policy="auto"
    )
    assert got == ResolvedAgent(
        budget=128000, reserve=0.1, policy="off", planner="optimistic", low_watermark=0.5
    )
    # an override with only a token leaves the requests in charge
    got = resolve_agent(cfg, "ci bot", requested_budget=9000)
    assert got == ResolvedAgent(
        budget=9000, reserve=0.2, policy="manual", planner="recency", low_watermark=0.5
    )
    # an overridden key's request is not used, so not validated either
    assert resolve_agent(cfg, "planner-bot", requested_reserve=0.99).reserve == 0.1


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"requested_budget": 0}, "requested budget must be a positive integer, got 0"),
        ({"requested_budget": True}, "requested budget must be a positive integer, got True"),
        ({"requested_reserve": 0.0}, "requested reserve must be in (0, 0.8), got 0.0"),
        ({"requested_reserve": 0.85}, "requested reserve must be in (0, 0.8), got 0.85"),
        ({"requested_policy": "never"}, "requested policy must be one of auto, manual, off, got 'never'"),
    ],
)
def test_resolve_agent_rejects_bad_requests(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        resolve_agent(Config(), "a", **kwargs)  # type: ignore[arg-type]
    assert str(info.value) == fragment


# --- address helpers -------------------------------------------------------------------------------


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    assert parse_listen("metrics.lan:80") == ("metrics.lan", 80)
    for bad in ("", "9464", ":9464", "host:", "host:0", "host:65536", "::1:9464", "host:９４"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_parse_mqtt_url() -> None:
    assert parse_mqtt_url("mqtt://broker") == ("broker", 1883)
    assert parse_mqtt_url("mqtt://broker:1884/") == ("broker", 1884)
    assert parse_mqtt_url("mqtt://[::1]:1884") == ("::1", 1884)
    for bad in (
        "",
        "broker:1883",
        "mqtts://broker",
        "mqtt://",
        "mqtt://u:p@broker",
        "mqtt://b/x",
        "mqtt://b:x",
    ):
        with pytest.raises(ValueError):
            parse_mqtt_url(bad)


def test_the_auto_low_watermark_follows_the_reserve(tmp_path: Path) -> None:
    """Unset, the low watermark is min(0.7, 1 - reserve - 0.15): any reserve below 0.8 works, and a
    larger reserve keeps a band of 0.15 under its high watermark; set, it is used as is."""
    assert low_ratio(Config().compaction, 0.15) == 0.7
    assert low_ratio(Config().compaction, 0.3) == 0.55
    assert low_ratio(Config().compaction, 0.79) == 0.06
    assert resolve_agent(Config(), "a", requested_reserve=0.5).low_watermark == 0.35
    cfg = load(write(tmp_path, "[compaction]\nreserve = 0.5\n[agents.bot]\nreserve = 0.3\n"))
    assert resolve_agent(cfg, "x").low_watermark == 0.35
    assert resolve_agent(cfg, "bot").low_watermark == 0.55
    fixed = load(write(tmp_path, "[compaction]\nlow_watermark = 0.5\n"))
    assert resolve_agent(fixed, "x", requested_reserve=0.3).low_watermark == 0.5
    with pytest.raises(ValueError, match=r"requested reserve must be in \(0, 0.5\)"):
        resolve_agent(fixed, "x", requested_reserve=0.5)
