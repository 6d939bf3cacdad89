"""Handing memory pages back to the kernel that llama.cpp keeps but does not need between calls.

llama.cpp keeps the logits of the last decode in a host buffer sized for the most outputs one
decode has asked for: after the model has scored lines (``[model] score_rows`` positions a decode,
every position's logits read back: watcher's relevance and digests, summarizer.logprobs) that is
rows x vocabulary x 4 bytes, 25 MB at 128 rows of a 49 152-token vocabulary, resident for the
process's life although the next decode overwrites whatever it reads. :func:`drop` tells the
kernel those pages' contents are not needed (``madvise(MADV_DONTNEED)``: private anonymous pages
read back as zeros, and cost nothing until written again); the next scoring touches them anew, a
page fault per 4 kB (~6 000 for 25 MB: milliseconds, against seconds of scoring).

Only whole pages inside the given range are dropped. Elsewhere than Linux, or without ``madvise``
in the C library, nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import sys
from typing import Final

MADV_DONTNEED: Final = 4  # <sys/mman.h>, Linux
PAGE: Final = mmap.PAGESIZE


@functools.cache
def libc() -> ctypes.CDLL | None:
    """The C library, looked up once (also watcher.serve.heap's malloc settings); None if it
    cannot be loaded."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


@functools.cache
def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    fn = getattr(libc(), "madvise", None) if sys.platform.startswith("linux") else None
    if fn is not None:
        fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        fn.restype = ctypes.c_int
    return fn


def drop(address: int, size: int) -> int:
    """Drop the whole pages of ``[address, address + size)``: their contents are gone (they read
    as zeros) and they take no memory until written. Returns the bytes dropped (0: none, or not
    supported here)."""
    madvise = _madvise()
    start = -(-address // PAGE) * PAGE  # the first page boundary at or after address
    end = (address + size) // PAGE * PAGE
    if madvise is None or not address or end <= start:
        return 0
    return end - start if madvise(start, end - start, MADV_DONTNEED) == 0 else 0
