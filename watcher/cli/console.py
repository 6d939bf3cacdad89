"""What the operator commands print and check: `compactd status`, `agents`, `config check`, and the
`run` flags that override the config file (--model, --no-model, --metrics, --mqtt).

Kept apart from watcher.cli (argparse wiring only) so the rendering is plain functions of the
daemon's STATE reply.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from watcher.config import settings as cfgmod
from watcher.config.settings import Config, ConfigError, low_ratio

OFF = "off"


class UsageError(ValueError):
    """A command-line value is wrong (exit code 2)."""


# --- `run` flags over the config file ---------------------------------------------------------------


def apply_run_flags(cfg: Config, args: argparse.Namespace) -> Config:
    """``cfg`` with the `run` flags applied; the daemon re-applies them on every reload (SIGHUP)."""
    r = dataclasses.replace
    if getattr(args, "model", None):
        cfg = r(cfg, model=r(cfg.model, path=args.model))
    if getattr(args, "no_model", False):
        cfg = r(cfg, model=r(cfg.model, enabled=False))
    if getattr(args, "require_model", False):
        cfg = r(cfg, model=r(cfg.model, required=True))
    if (listen := getattr(args, "metrics", None)) is not None:
        cfg = r(cfg, metrics=r(cfg.metrics, listen=parse_metrics_flag(listen)))
    if (url := getattr(args, "mqtt", None)) is not None:
        cfg = r(cfg, mqtt=r(cfg.mqtt, url=parse_mqtt_flag(url)))
    return cfg


def parse_metrics_flag(value: str) -> str:
    """``--metrics ADDR:PORT`` (or ``off``) as a metrics.listen value."""
    return _off_or(value, "--metrics", cfgmod.parse_listen, "ADDR:PORT such as 127.0.0.1:9464, or 'off'")


def parse_mqtt_flag(value: str) -> str:
    """``--mqtt URL`` (or ``off``) as an mqtt.url value."""
    return _off_or(value, "--mqtt", cfgmod.parse_mqtt_url, "mqtt://HOST[:PORT], or 'off'")


def _off_or(value: str, flag: str, check: Callable[[str], object], expected: str) -> str:
    """``value`` once ``check`` accepts it, "" for ``off``; a usage error naming ``flag`` otherwise."""
    if value.lower() in (OFF, ""):
        return ""
    try:
        check(value)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc} (expected {expected})") from None
    return value


# --- which daemon the client commands ask ---------------------------------------------------------

SYSTEM_ENDPOINT = "ipc:///run/compactd/agents.sock"  # RuntimeDirectory=compactd in the unit


def client_endpoint() -> str:
    """Without --socket: this user's daemon if it has one, else the system service's socket."""
    from watcher.runtime.paths import default_endpoint, ipc_path

    own = default_endpoint()
    own_path = ipc_path(own)
    if own_path is not None and _present(own_path):
        return own
    if _present(Path(SYSTEM_ENDPOINT.removeprefix("ipc://"))):
        return SYSTEM_ENDPOINT
    return own


def _present(path: Path) -> bool:
    """The file exists, or its directory hides it from us (then the error will say so)."""
    try:
        path.stat()
    except PermissionError:
        return True
    except OSError:
        return False
    return True


# --- `config check` ---------------------------------------------------------------------------------


def check_config(path: str | None) -> tuple[Config, str]:
    """Validate a file (or, with None, what `compactd run` would load: the lookup order plus the
    COMPACTD_* environment). Returns the config and a one-paragraph summary; raises ConfigError."""
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{p}: {'is a directory' if p.is_dir() else 'no such file'}")
        cfg = cfgmod.load(p)
        what = str(p)
    else:
        cfg = cfgmod.load_effective(None)
        what = cfg.source or "no config file found (defaults)"
        if cfg.env_overrides:
            what += " + " + ", ".join(f"${v}" for v in cfg.env_overrides)
    c = cfg.compaction
    lines = [
        f"{what}: ok",
        f"  compaction  policy {c.policy}, reserve {c.reserve:g}, low watermark {low_ratio(c, c.reserve):g}, "
        f"default budget {c.default_budget}",
        f"  model       {'off' if not cfg.model.enabled else cfg.model.path or 'SmolLM2-135M (default)'}",
        f"  metrics     {cfg.metrics.listen or 'off'}",
        f"  mqtt        {cfg.mqtt.url or 'off'}",
        f"  agents      {len(cfg.agents)} override(s)"
        + (f": {', '.join(sorted(cfg.agents))}" if cfg.agents else ""),
    ]
    return cfg, "\n".join(lines)


# --- `status` and `agents` --------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) else str(x)


def _pct(x: Any) -> str:
    return f"{float(x) * 100:.1f}%" if isinstance(x, int | float) else "-"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """Columns sized to fit; numbers right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
        ).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


def agent_state(a: dict[str, Any]) -> str:
    """One word for what the agent is waiting on, and its strategy when degraded under load."""
    level = a.get("degraded") or "normal"
    state = _waiting_on(a)
    return state if level == "normal" else f"{state}, degraded: {level}"


def _waiting_on(a: dict[str, Any]) -> str:
    if not a.get("synced", True):
        return "resyncing"
    if a.get("compacting"):
        return "compacting"
    if a.get("pending_proposals"):
        return "proposal-out"
    if a.get("stuck"):
        return "stuck"
    return "ok"


def render_agents(agents: Sequence[dict[str, Any]]) -> str:
    if not agents:
        return "no agents attached"
    headers = ["AGENT", "POLICY", "TOKENS", "BUDGET", "USAGE", "HEADROOM", "RESERVE", "PENDING"]
    headers += ["COMPACTIONS", "SAVED", "ARCHIVED", "STATE"]
    right = [False, False, True, True, True, True, True, True, True, True, True, False]
    rows = []
    for a in sorted(agents, key=lambda a: (-float(a.get("usage", 0)), str(a.get("agent")))):
        rows.append(
            [
                str(a.get("agent", "?")),
                str(a.get("policy", "-")),
                _n(a.get("tokens", 0)),
                _n(a.get("budget", 0)),
                _pct(a.get("usage")),
                _pct(a.get("headroom")),
                _pct(a.get("reserve")),
                _n(a.get("pending_proposals", 0)),
                _n(a.get("compactions", 0)),
                _n(a.get("tokens_saved", 0)),
                _n(a.get("archived_sections", 0)),
                agent_state(a),
            ]
        )
    return table(headers, rows, right)


def render_status(reply: dict[str, Any], endpoint: str = "") -> str:
    d = reply.get("daemon", {})
    agents = reply.get("agents", [])
    worst = min((float(a.get("headroom", 1.0)) for a in agents), default=None)
    head = f"compactd up {_duration(float(d.get('uptime_s', 0)))} · {d.get('agents', len(agents))} agent(s)"
    if worst is not None:
        head += f" · worst headroom {worst * 100:.0f}%"
    lines = [head]
    if endpoint:
        lines.append(f"  endpoint  {endpoint}")
    if d.get("degraded"):
        lines.append(f"  model     DEGRADED: {d.get('degraded_reason') or '?'} (deterministic digests only)")
    else:
        lines.append(f"  model     ok: {d.get('model') or 'SmolLM2-135M (default)'}")
    w = d.get("weights")
    if isinstance(w, dict) and w.get("requested"):
        lines.append(
            f"  weights   {w.get('in_use') or 'shipped'} (asked: {w['requested']})"
            + (f"; re-encoding failed: {w['error']}" if w.get("error") else "")
        )
    if "config" in d:
        reloads = d.get("reloads") or {}
        extra = f" (reloads: {reloads.get('ok', 0)} ok, {reloads.get('failed', 0)} failed)" if reloads else ""
        lines.append(f"  config    {d.get('config') or 'defaults (no file)'}{extra}")
    if "metrics" in d:
        lines.append(f"  metrics   {'http://' + d['metrics'] + '/metrics' if d.get('metrics') else 'off'}")
    if "mqtt" in d:
        m = d.get("mqtt")
        if isinstance(m, dict):
            state = "connected" if m.get("connected") else "NOT CONNECTED (events are dropped)"
            lines.append(
                f"  mqtt      {m.get('broker')} {state} · {m.get('published', 0)} published · "
                f"{m.get('dropped', 0)} dropped"
            )
        else:
            lines.append("  mqtt      off")
    dm = d.get("digest_methods")
    if isinstance(dm, dict):
        methods = " · ".join(f"{m} {dm.get(m, 0)}" for m in ("model", "deterministic", "masking", "headtail"))
        skipped = ", ".join(f"{k} {v}" for k, v in sorted((dm.get("model_skipped") or {}).items()) if v)
        lines.append(
            f"  digests   {methods}"
            + (f" · model skipped: {skipped}" if skipped else "")
            + f" · {dm.get('agents_degraded', 0)} agent(s) degraded under load"
        )
    errors = d.get("errors") or {}
    if errors:
        lines.append(
            f"  errors    {d.get('frames', 0)} frames, "
            + ", ".join(f"{k} {v}" for k, v in sorted(errors.items(), key=lambda kv: -kv[1]))
        )
    lines.append("")
    lines.append(render_agents(agents))
    return "\n".join(lines)
