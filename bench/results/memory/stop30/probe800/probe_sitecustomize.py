"""Measurement only: on SIGUSR2 the daemon writes its Section objects' held texts, gc-tracked objects
by type, glibc's mallinfo2 and pymalloc's stats to /tmp/probe (see README.txt)."""

import collections
import contextlib
import ctypes
import gc
import json
import os
import sys

FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")


class Mallinfo2(ctypes.Structure):
    _fields_ = [(k, ctypes.c_size_t) for k in FIELDS]


def _dump(signum, frame):
    from ipc.sections import Section

    get = getattr(sys.modules["ipc.sections"], "_get_text", None)
    gc.unfreeze()  # frozen objects are not listed by gc.get_objects
    n = npacked = str_bytes = packed_bytes = 0
    hist: dict[tuple[str, int], int] = {}
    for o in gc.get_objects():
        if type(o) is Section:
            n += 1
            held = get(o) if get else o.text
            if isinstance(held, str):
                str_bytes += sys.getsizeof(held)
                kb = (o.kind, min(len(held) // 256, 8) * 256)
                hist[kb] = hist.get(kb, 0) + sys.getsizeof(held)
            else:
                npacked += 1
                packed_bytes += sys.getsizeof(held.data) + sys.getsizeof(held)
    cnt: collections.Counter[str] = collections.Counter()
    size: collections.Counter[str] = collections.Counter()
    for o in gc.get_objects():
        t = type(o).__name__
        cnt[t] += 1
        size[t] += sys.getsizeof(o)
    out: dict[str, object] = {}
    by_size = sorted(hist.items(), key=lambda kv: -kv[1])
    out["hist"] = [(f"{k[0]}:{k[1]}", round(v / 1e6, 2)) for k, v in by_size]
    out["top"] = [(t, cnt[t], round(size[t] / 1e6, 2)) for t, _ in size.most_common(25)]
    out.update(sections=n, packed=npacked, str_mb=str_bytes / 1e6, packed_mb=packed_bytes / 1e6)
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Mallinfo2
    m = libc.mallinfo2()
    out.update({k: getattr(m, k) / 1e6 for k in FIELDS})
    with open(f"/tmp/probe/dump-{os.getpid()}.json", "w") as f:
        json.dump(out, f, indent=1)
    with open(f"/tmp/probe/pymalloc-{os.getpid()}.txt", "w") as f:
        fd = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(fd, 2)
            os.close(fd)


if "run" in sys.argv or any("watcher" in a for a in sys.argv):
    import signal

    with contextlib.suppress(Exception):
        signal.signal(signal.SIGUSR2, _dump)
