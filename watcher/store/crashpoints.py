"""Named crash points for the crash benchmark and tests: SIGKILL at an exact moment.

A random kill rarely lands in a window that lasts microseconds ("the archive is committed, the
proposal is not sent yet"). With ``_COMPACTD_CRASHPOINT=NAME:N`` in its environment the daemon
kills itself with SIGKILL the N-th time it reaches crash point NAME — a real kill -9, at a chosen
moment. With ``_COMPACTD_CRASHPOINT_FILE=PATH`` instead, the point is armed later, when a file
``PATH`` holding ``NAME:N`` appears (the crash benchmark arms it after its checks). Unset (always,
in production) a crash point costs one lookup.

Points: ``archived`` (originals committed, summarization about to run), ``planned`` (proposal
recorded, not yet marked sent), ``before_send`` (marked sent, not yet on the wire), ``ack``
(an ACK received, not yet committed), ``checkpoint`` (a checkpoint about to be committed),
``indexed`` (the search index committed a slice in its file, the store's marks not yet updated:
watcher.store.fts).
"""

from __future__ import annotations

import os
import signal
from typing import Final

ENV: Final = "_COMPACTD_CRASHPOINT"
ENV_FILE: Final = "_COMPACTD_CRASHPOINT_FILE"
POINTS: Final = ("archived", "planned", "before_send", "ack", "checkpoint", "indexed")


def _parse(value: str) -> tuple[str, int] | None:
    name, _, count = value.partition(":")
    if name not in POINTS:
        return None
    return name, int(count) if count.isdigit() and int(count) > 0 else 1


_armed = _parse(os.environ.get(ENV, ""))
_arm_file = os.environ.get(ENV_FILE, "")
_hits = {"n": 0}


def _armed_now() -> tuple[str, int] | None:
    global _armed  # noqa: PLW0603 - armed once, from a file the benchmark writes
    if _armed is None and _arm_file:
        try:
            with open(_arm_file, encoding="ascii") as f:
                _armed = _parse(f.read().strip())
        except OSError:
            return None
    return _armed


def crashpoint(name: str) -> None:
    """SIGKILL this process if crash point ``name`` is armed and this is its N-th hit."""
    armed = _armed if _armed is not None or not _arm_file else _armed_now()
    if armed is None or armed[0] != name:
        return
    _hits["n"] += 1
    if _hits["n"] >= armed[1]:
        os.write(2, f'{{"event": "crashpoint", "point": "{name}", "hit": {_hits["n"]}}}\n'.encode())
        os.kill(os.getpid(), signal.SIGKILL)
