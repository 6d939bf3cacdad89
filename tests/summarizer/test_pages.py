"""summarizer.pages: whole pages inside a range are handed back (they read as zeros and are no
longer resident); the partial pages at its ends keep their bytes."""

from __future__ import annotations

import ctypes
import mmap
import sys

import pytest

from summarizer import pages
from tests.fixtures.pagemap import resident

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and pagemap: Linux")


def test_drop_hands_back_the_whole_pages_inside_the_range_and_keeps_the_edges() -> None:
    n = 64
    region = mmap.mmap(-1, n * mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # as malloc
    region.write(b"\x07" * len(region))
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    assert resident(address, len(region)) == n
    start, size = address + 100, n * mmap.PAGESIZE - 200  # unaligned at both ends
    dropped = pages.drop(start, size)
    assert dropped == (n - 2) * mmap.PAGESIZE  # the first and the last page are partly outside
    assert resident(address, len(region)) == 2
    assert region[: mmap.PAGESIZE] == b"\x07" * mmap.PAGESIZE  # the edges keep their bytes
    assert region[-mmap.PAGESIZE :] == b"\x07" * mmap.PAGESIZE
    assert region[mmap.PAGESIZE : -mmap.PAGESIZE] == bytes((n - 2) * mmap.PAGESIZE)  # the rest reads zeros
    assert pages.drop(start, 10) == 0  # no whole page inside
    assert pages.drop(0, 1 << 20) == 0  # no address: nothing
    region.close()
