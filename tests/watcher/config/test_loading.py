"""watcher.config: defaults, a full file, and bad values named by file, line and key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.watcher.config.cases import FULL, TOKEN_A, TOKEN_B, effective, load_error, write
from watcher.config import schema
from watcher.config.settings import WEIGHT_FORMATS, Config, load

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
    assert cfg.mqtt == schema.MqttConfig(url="", topic_prefix="compactd/v1", qos=1)
    assert cfg.store == schema.StoreConfig(retention_days=30, max_archive_mb=1024, synchronous="normal")


def test_empty_file_is_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "# nothing\n")
    assert load(path) == Config(source=str(path))
    assert load(str(path)) == Config(source=str(path))


def test_full_file_round_trips(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    expected = Config(
        daemon=schema.DaemonConfig(
            socket="ipc:///run/compactd/sock",
            state_dir="/var/lib/compactd",
            max_frame_bytes=1048576,
            heartbeat_s=2.0,
            agent_timeout_s=30.5,
            log_level="debug",
            log_format="json",
        ),
        model=schema.ModelConfig(
            path="/srv/models/m.gguf",
            enabled=False,
            n_ctx=4096,
            n_threads=3,
            n_batch=256,
            score_rows=96,
            max_tokens=200,
            timeout_s=15.0,
            weights="f32",
            cache_dir="/var/cache/compactd-test",
        ),
        compaction=schema.CompactionConfig(
            reserve=0.2,
            low_watermark=0.5,
            policy="manual",
            planner="recency",
            fresh_turns=0,
            default_budget=8000,
        ),
        agents={
            "planner-bot": schema.AgentOverride(
                budget=128000, reserve=0.1, policy="off", planner="optimistic", token=TOKEN_A
            ),
            "ci bot": schema.AgentOverride(token=TOKEN_B),
        },
        source=str(path),
        metrics=schema.MetricsConfig(listen="127.0.0.1:9464"),
        mqtt=schema.MqttConfig(url="mqtt://broker.lan:1884", topic_prefix="site/compactd", qos=2),
        store=schema.StoreConfig(retention_days=0, max_archive_mb=64, synchronous="full"),
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
    assert effective(tmp_path, env).model == schema.ModelConfig(weights=weights, cache_dir=str(tmp_path))


def test_model_weights_formats_are_the_engines() -> None:
    from summarizer.weights import FORMATS, normalize

    assert WEIGHT_FORMATS == FORMATS
    assert schema.ModelConfig().weights in ("", "shipped", *FORMATS)
    assert normalize("shipped") == normalize("") == ""
    assert [normalize(f) for f in FORMATS] == list(FORMATS)


def test_dotted_and_inline_forms_are_accepted(tmp_path: Path) -> None:
    text = "compaction.reserve = 0.25\nmodel = { n_ctx = 1024 }\nagents.bot.budget = 5000\n"
    cfg = load(write(tmp_path, text))
    assert cfg.compaction.reserve == 0.25
    assert cfg.model.n_ctx == 1024
    assert cfg.agents == {"bot": schema.AgentOverride(budget=5000)}


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
