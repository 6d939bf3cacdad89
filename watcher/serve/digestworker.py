"""The digest worker process: deterministic digests for the daemon (watcher.serve.digestpool).

It is a plain child process (``python -P -c ...``, see :func:`command`) talking over two pipes, not
a ``multiprocessing`` worker: spawn would import the daemon's ``__main__`` (the whole CLI) into it
and start multiprocessing's resource tracker beside it, a third process. At 800 agents that was
22-28 MB of worker and 8 MB of tracker; this process imports the summarizer and nothing else of the
daemon (no structlog, no ZeroMQ, no llama.cpp).

It also computes the planner's section features (watcher.planning.features: identifiers, distinct
lines, terms), which were a fifth of the serving loop's time at 3 200 agents (docs/BENCHMARKS.md,
stop 35): regular expressions over every new section's text, which hold the interpreter lock.

Frames both ways are a 4-byte big-endian length and a pickle. A request is ``("digest", items,
ref, target_tokens, bias)`` or ``("features", texts, with_terms)``; the reply is ``(True, digest)``
or ``(True, [features, ...])``, or ``(False, exception)``. One request at
a time: the daemon writes the next one after it has read the reply. The replies go out on a
duplicate of the original stdout; fd 1 itself then points at stderr, so that a stray print cannot
corrupt a frame. EOF on stdin ends the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import math
import os
import pickle
import re
import signal
import struct
import sys
from collections.abc import Sequence
from typing import IO, Any

from summarizer.digest import Digest, Item, Summarizer, approx_tokens
from watcher.planning.features import features
from watcher.serve import heap

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WORKER_NICE = 5  # the worker's niceness: when the cores are short, the daemon's loop (ingest) goes first
HEADER = struct.Struct(">I")
MAX_FRAME = 2**31  # a frame's length fits the header
# a BPE pre-tokenizer's pieces (GPT-2's pattern, ASCII classes): contractions, a word or a digit with
# its leading space, a run of punctuation, whitespace
PIECES = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def command(parent: int) -> list[str]:
    """The worker's command line: this interpreter, the tree the daemon runs from first on the
    module path (not the working directory: ``-P``), the daemon's pid to die with."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = f"import sys; sys.path.insert(0, {root!r}); import {__name__} as w; w.main({parent})"
    return [sys.executable, "-P", "-c", code]


def tokens_per_piece(items: Sequence[Item]) -> float:
    """The region's own rate, from its sections' exact counts."""
    pieces = sum(len(PIECES.findall(i.text)) for i in items if i.tokens > 0)
    tokens = sum(i.tokens for i in items if i.tokens > 0)
    return tokens / pieces if pieces and tokens else 1.0


def digest(items: list[Item], ref: str, target_tokens: int, bias: float | None) -> Digest:
    """The digest counted at the region's tokens per piece times ``bias`` (None: with approx_tokens,
    as the daemon counts without a model)."""
    if bias is None:
        count = approx_tokens
    else:
        rate = tokens_per_piece(items) * bias  # here, not in the daemon: a region can be megabytes

        def count(text: str) -> int:
            return math.ceil(len(PIECES.findall(text)) * rate)

    try:
        return asyncio.run(Summarizer(None, count=count, off_loop=False).digest(items, ref, target_tokens))
    finally:
        heap.trim()  # the region's strings are freed: their pages go back (this process's own)


def write_frame(out: IO[bytes], obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) >= MAX_FRAME:
        raise ValueError(f"a frame of {len(data)} bytes does not fit its header")
    out.write(HEADER.pack(len(data)))
    out.write(data)
    out.flush()


def read_frame(src: IO[bytes]) -> object | None:
    """The next frame's object; None at EOF (the other side closed its end)."""
    head = src.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    data = src.read(size)
    if len(data) < size:
        return None
    obj: object = pickle.loads(data)  # the daemon, our parent, is the only writer
    return obj


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this worker when the daemon dies, even by kill -9 (else it would wait on its
    pipe forever, an orphan outside systemd's cgroup cleanup)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the daemon died before prctl took effect
        os._exit(0)


def _reply(request: Any) -> tuple[bool, object]:
    try:
        if request[0] == "features":
            _, texts, with_terms = request
            return True, [features(t, with_terms) for t in texts]
        _, items, ref, target, bias = request
        return True, digest(items, ref, target, bias)
    except Exception as exc:  # handed back to the daemon, which raises it where it asked
        return False, exc


def main(parent: int) -> None:
    """Serve requests from stdin until EOF."""
    _die_with_parent(parent)
    heap.configure()
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon decides when to stop
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    src = sys.stdin.buffer
    with contextlib.suppress(BrokenPipeError):  # the daemon closed its end: it is stopping
        while (request := read_frame(src)) is not None:
            ok, value = _reply(request)
            try:
                write_frame(out, (ok, value))
            except (pickle.PicklingError, TypeError, AttributeError) as exc:  # an unpicklable exception
                write_frame(out, (False, RuntimeError(f"{type(value).__name__}: {value} ({exc})")))
