"""Long texts of the mirrors held deflated (ipc.sections.packed), packed in a thread shortly after
they arrive.

A mirror holds every section of an agent's context for as long as it is there, and most of its
bytes are long tool outputs that deflate 4-8x. The serving loop only queues the new long sections
(:meth:`Packer.note`: a length check each). Every :data:`PACK_EVERY_S` a thread of its own packs
them (zlib releases the GIL while it deflates), at niceness +:data:`PACK_NICE`: below the inference
thread's +10, whose CPU it took at the daemon's priority (fewer model jobs at the knee,
docs/BENCHMARKS.md "Memory: long texts held deflated"). When the cores are short, the packing
waits, not the model or the loop.

Back on the loop each packed section takes its original's place in the mirror (``Context.swap``:
the same position, version and content), unless the original is gone by then (the packed copy is
dropped), or its agent's job is planning on a snapshot of the mirror (it would find the mirror
moved and plan again): then at the next round. A packed section has the same ``text_key`` as its
original, so the scorer's cached features stay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from ipc.sections import PACK_MIN_CHARS, Section, held_size, is_packed, packed, text_len
from summarizer.engine import lower_thread_priority
from watcher.serve.session import Session

PACK_EVERY_S: Final = 0.25  # how long a new long text may stay unpacked (a pacing timer)
PACK_NICE: Final = 15  # added to the packing thread's niceness (Linux: per thread)
# most sections queued at once: when the cores are too short for the packing thread to keep up,
# later long texts stay as they came (counted) rather than the queue growing without bound
MAX_WAITING: Final = 20_000


def _pack_all(sections: list[Section]) -> list[Section]:
    return [packed(s) for s in sections]


class Packer:
    def __init__(self, enabled: Callable[[], bool] = lambda: True) -> None:
        self.enabled = enabled  # read at each note: [daemon] pack_texts, reloadable
        self._pool: ThreadPoolExecutor | None = None  # the packing thread, started at the first batch
        self._todo: list[tuple[Session, Section]] = []  # to pack
        self._ready: list[tuple[Session, Section, Section]] = []  # packed, to swap in
        self.sections = 0  # sections held packed in place of their originals
        self.saved = 0  # bytes of str those originals took, minus what their packed texts take
        self.skipped = 0  # long texts not queued because MAX_WAITING were waiting

    def note(self, state: Session, sections: Iterable[Section]) -> None:
        """Queue the long texts among ``sections``, just applied to ``state``'s mirror."""
        if not self.enabled():
            return
        for s in sections:
            if text_len(s) >= PACK_MIN_CHARS and not is_packed(s):
                if self.waiting >= MAX_WAITING:
                    self.skipped += 1
                else:
                    self._todo.append((state, s))

    @property
    def waiting(self) -> int:
        return len(self._todo) + len(self._ready)

    async def run(self, every_s: float = PACK_EVERY_S) -> None:
        while True:
            await asyncio.sleep(every_s)  # a pacing timer, not a wait for a state
            await self.pack()

    async def pack(self) -> int:
        """Pack what is queued (in a thread) and swap in what can be; the number swapped in."""
        if self._todo:
            # only what the mirrors still hold: a section folded meanwhile is not worth packing
            batch = [(state, s) for state, s in self._todo if state.ctx.get(s.id) is s]
            self._todo = []
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    1, "compactd-pack", initializer=lower_thread_priority, initargs=(PACK_NICE,)
                )
            done = await asyncio.get_running_loop().run_in_executor(
                self._pool, _pack_all, [s for _, s in batch]
            )
            self._ready.extend((state, old, new) for (state, old), new in zip(batch, done, strict=True))
        ready, self._ready = self._ready, []
        swapped = 0
        for state, old, new in ready:
            if new is old:
                continue  # not worth packing (short or incompressible)
            if state.planning:
                self._ready.append((state, old, new))  # after its plan
            elif state.ctx.swap(old, new):
                swapped += 1
                self.saved += held_size(old) - held_size(new)
        self.sections += swapped
        return swapped

    def close(self) -> None:
        """Stop the packing thread (a batch it is packing is finished and dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def stats(self) -> dict[str, int]:
        return {
            "packed_sections": self.sections,
            "packed_saved_bytes": self.saved,
            "pack_waiting": self.waiting,
            "pack_skipped": self.skipped,
        }
