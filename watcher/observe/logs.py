"""structlog configuration: JSON lines when stdout is not a TTY, readable console output when it is.

The daemon's own lines take structlog's direct path (docs/BENCHMARKS.md, "The daemon's own log
lines without the standard library (stop 56)"): a bound logger whose levels are methods, its
processors, and one write to stderr. They used to be handed to the standard library as a
`LogRecord` and rendered by its handler: three times the cost of a line, ~5 lines a compaction, on
the serving loop. Standard-library loggers (aiomqtt, asyncio, the proxy's) still go through
`logging`, rendered by the same processors, and both write under the handler's lock, so every line
the daemon writes has one shape and no two interleave.

What `configure` may change later (the level, the format, the stream: a reload, a test) is read on
every line from `_now`, so a logger a module bound and cached before stays in step with it.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

_LEVEL = {  # a logger method's level; the config's levels (watcher.config.schema.LOG_LEVELS) among them
    "debug": logging.DEBUG, "info": logging.INFO, "msg": logging.INFO, "warning": logging.WARNING,
    "warn": logging.WARNING, "error": logging.ERROR, "exception": logging.ERROR,
    "critical": logging.CRITICAL, "fatal": logging.CRITICAL,
}  # fmt: skip


@dataclass
class _Current:
    level: int = logging.INFO
    handler: logging.StreamHandler[TextIO] | None = None
    render: Processor = field(default_factory=structlog.processors.JSONRenderer)


_now = _Current()


def _at_level(logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
    if _LEVEL.get(method, logging.INFO) < _now.level:
        raise structlog.DropEvent
    return event


def _add_name(logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
    event.setdefault("logger", getattr(logger, "name", "compactd"))
    return event


def _render(logger: WrappedLogger, method: str, event: EventDict) -> Any:
    return _now.render(logger, method, event)


class _Line:
    """structlog's logger for one name: writes a rendered line to the handler's stream, under its lock."""

    def __init__(self, name: str) -> None:
        self.name = name

    def msg(self, message: str) -> None:
        handler = _now.handler
        if handler is None:
            return
        handler.acquire()
        try:
            handler.stream.write(message + "\n")
            handler.stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stderr loses the line, never the daemon
        finally:
            handler.release()

    debug = info = warning = warn = error = exception = critical = fatal = msg


def _line(*args: Any) -> _Line:
    return _Line(args[0] if args and isinstance(args[0], str) else "compactd")


def configure(level: str = "info", fmt: str = "auto") -> None:
    json_out = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: Processor = (
        structlog.processors.JSONRenderer() if json_out else structlog.dev.ConsoleRenderer(colors=False)
    )
    stamp: list[Processor] = [
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.contextvars.merge_contextvars,
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                *stamp,
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    _now.level, _now.handler, _now.render = _LEVEL.get(level, logging.INFO), handler, renderer
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_now.level)
    structlog.configure(
        # the level first: a debug call costs a dictionary lookup when the level is info
        processors=[
            _at_level,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            _add_name,
            *stamp,
            structlog.processors.format_exc_info,
            _render,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=_line,
        cache_logger_on_first_use=True,
    )


def get(name: str = "compactd") -> Any:
    return structlog.get_logger(name)
