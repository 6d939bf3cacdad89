"""Long texts of the mirrors held deflated (ipc.sections.packed), packed in a thread shortly after
they arrive.

A mirror holds every section of an agent's context for as long as it is there, and most of its
bytes are long tool outputs that deflate 4-8x. Deflating on the serving loop when a frame arrives
measured the same ingest p99 at 800 agents but a higher one at 1 600, where the loop is short of
CPU (docs/BENCHMARKS.md, "Memory: long texts held deflated"); so the loop only queues the new long
sections (:meth:`Packer.note`: a length check each), and every :data:`PACK_EVERY_S` a thread packs
them (zlib releases the GIL while it deflates). Back on the loop each packed section takes its
original's place in the mirror (``Context.swap``: the same position, version and content), unless
the original is gone or changed by then (the packed copy is dropped), or its agent's job is planning
on a snapshot of the mirror (it would find the mirror moved and plan again): then at the next round.
A packed section has the same ``text_key`` as its original, so the scorer's cached features stay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Final

from ipc.sections import PACK_MIN_CHARS, Section, held_size, is_packed, packed, text_len
from watcher.serve.session import Session

PACK_EVERY_S: Final = 0.25  # how long a new long text may stay unpacked (a pacing timer)


def _pack_all(sections: list[Section]) -> list[Section]:
    return [packed(s) for s in sections]


class Packer:
    def __init__(self, enabled: Callable[[], bool] = lambda: True) -> None:
        self.enabled = enabled  # read at each note: [daemon] pack_texts, reloadable
        self._todo: list[tuple[Session, Section]] = []  # to pack
        self._ready: list[tuple[Session, Section, Section]] = []  # packed, to swap in
        self.sections = 0  # sections held packed in place of their originals
        self.saved = 0  # bytes of str those originals took, minus what their packed texts take

    def note(self, state: Session, sections: Iterable[Section]) -> None:
        """Queue the long texts among ``sections``, just applied to ``state``'s mirror."""
        if not self.enabled():
            return
        for s in sections:
            if text_len(s) >= PACK_MIN_CHARS and not is_packed(s):
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
            batch, self._todo = self._todo, []
            done = await asyncio.to_thread(_pack_all, [s for _, s in batch])
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

    def stats(self) -> dict[str, int]:
        return {
            "packed_sections": self.sections,
            "packed_saved_bytes": self.saved,
            "pack_waiting": self.waiting,
        }
