"""The C heap of a long-running daemon (glibc malloc): fewer arenas, free pages handed back.

glibc gives each thread that allocates its own arena (the serving loop, llama.cpp's inference
thread, ZeroMQ's I/O thread, the executors), up to 8 per core, and a freed block stays in the arena
that allocated it, so each arena keeps a high-water mark of pages nobody uses. The daemon and its
digest worker run with two arenas, and the worker hands its free pages back to the kernel after
each digest (``malloc_trim``: a region of megabytes comes and goes). At the knee (200 agents
replaying trajectories, the model loaded) this and a worker without a tokenizer took the processes'
PSS from 431-436 MB to 389-392 MB (docs/BENCHMARKS.md, "Memory at the knee"); trimming the daemon
as well every few seconds measured no lower, and is not done (it locks each arena while it walks
it).

Blocks of :data:`MMAP_THRESHOLD` or more are mapped on their own and unmapped when freed. glibc's
default threshold rises to the size of the largest mapped block freed so far (up to 32 MB), so once
a big block has come and gone (scoring's log-softmax buffer, 32 rows x vocabulary x 4 bytes = 6.3 MB
per call; a region's joined text; a large decoded frame), later blocks of that size come from an
arena or the heap, which keep their pages. A fixed threshold keeps them mapped: at 400 agents with
the model, PSS 419.7 -> 385.6 MB (docs/BENCHMARKS.md, "Memory per agent"; which of those blocks
gave how much was not measured). Elsewhere (musl, macOS) these functions are no-ops: they are
looked up, not assumed.
"""

from __future__ import annotations

from typing import Final

from summarizer.pages import libc

M_MMAP_THRESHOLD: Final = -3  # <malloc.h>
M_ARENA_MAX: Final = -8
ARENAS: Final = 2
MMAP_THRESHOLD: Final = 128 << 10  # bytes: glibc's initial threshold, held (1 MB measured no lower)


def _mallopt(param: int, value: int) -> bool:
    """``mallopt(param, value)``; True if the C library has it and took the value."""
    mallopt = getattr(libc(), "mallopt", None)
    return bool(mallopt is not None and mallopt(param, value) == 1)


def configure() -> bool:
    """The daemon's and the worker's malloc settings, before any thread starts: at most
    :data:`ARENAS` arenas, blocks of :data:`MMAP_THRESHOLD` or more mapped on their own. True if
    the C library took both."""
    mapped = map_big_blocks()
    limited = limit_arenas()  # both, whatever the first returned
    return mapped and limited


def map_big_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Blocks of ``threshold`` bytes or more are mapped on their own and given back when freed,
    at a fixed threshold (glibc's would rise). True if the C library took it."""
    return _mallopt(M_MMAP_THRESHOLD, threshold)


def limit_arenas(arenas: int = ARENAS) -> bool:
    """At most ``arenas`` malloc arenas for the whole process. Call it before threads start (an
    arena a thread already has stays). True if the C library took it."""
    return _mallopt(M_ARENA_MAX, arenas)


def trim() -> bool:
    """Give the free pages of every arena back to the kernel (not only the heap's top). It locks
    each arena in turn while it walks it: call it off the serving loop. True if any were freed."""
    malloc_trim = getattr(libc(), "malloc_trim", None)
    return bool(malloc_trim is not None and malloc_trim(0) == 1)
