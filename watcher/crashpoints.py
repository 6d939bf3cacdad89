"""Named crash points for the crash benchmark and tests: SIGKILL at an exact moment.

A random kill rarely lands in a window that lasts microseconds ("the archive is committed, the
proposal is not sent yet"). With ``_COMPACTD_CRASHPOINT=NAME:N`` in its environment the daemon
kills itself with SIGKILL the N-th time it reaches crash point NAME — a real kill -9, at a chosen
moment. Unset (always, in production) a crash point costs one attribute lookup.

Points: ``archived`` (originals committed, summarization about to run), ``planned`` (proposal
recorded, not yet marked sent), ``before_send`` (marked sent, not yet on the wire), ``ack``
(an ACK received, not yet committed), ``checkpoint`` (a checkpoint about to be committed).
"""

from __future__ import annotations

import os
import signal
from typing import Final

ENV: Final = "_COMPACTD_CRASHPOINT"
POINTS: Final = ("archived", "planned", "before_send", "ack", "checkpoint")


def _parse(value: str) -> tuple[str, int] | None:
    name, _, count = value.partition(":")
    if name not in POINTS:
        return None
    return name, int(count) if count.isdigit() and int(count) > 0 else 1


_armed = _parse(os.environ.get(ENV, ""))
_hits = {"n": 0}


def crashpoint(name: str) -> None:
    """SIGKILL this process if crash point ``name`` is armed and this is its N-th hit."""
    if _armed is None or _armed[0] != name:
        return
    _hits["n"] += 1
    if _hits["n"] >= _armed[1]:
        os.write(2, f'{{"event": "crashpoint", "point": "{name}", "hit": {_hits["n"]}}}\n'.encode())
        os.kill(os.getpid(), signal.SIGKILL)
