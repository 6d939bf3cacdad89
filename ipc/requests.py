"""The requests part of AgentLink (ipc.client): the daemon's archive (RECALL, search, COMPRESS),
checkpoints (CHECKPOINT, RESTORE) with the side-effect ``epoch``, STATUS and ping."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from ipc.mirror import LinkMirror
from ipc.protocol import T
from ipc.sections import Section
from ipc.transport import MAX_INBOUND


class LinkRequests(LinkMirror):
    """Requests to the daemon's store; every page of a long answer is fetched."""

    # side-effect epoch: bump it (side_effect()) whenever the agent does something a context
    # restore cannot undo; RESTORE refuses a checkpoint saved at another epoch unless forced
    epoch: int

    async def recall(self, *refs: str) -> dict[str, list[Section]]:
        """The originals archived under ``refs`` (a digest's ``meta["archive"]``), all pages
        fetched. An entry the retention policy evicted comes back empty (see recall_items)."""
        out: dict[str, list[Section]] = {}
        for item in await self.recall_items({"refs": list(refs)}):
            out.setdefault(item["ref"], []).extend(_sections(item["sections"]))
        return out

    async def recall_sections(self, *ids: str) -> list[tuple[str, Section]]:
        """Archived copies of sections by id, newest first, as (archive ref, section); a digest's
        id gives the originals it replaced. Covers all of this agent's sessions."""
        return [
            (item["ref"], sec)
            for item in await self.recall_items({"sections": list(ids)})
            for sec in _sections(item["sections"])
        ]

    async def recall_items(self, what: dict[str, Any]) -> list[dict[str, Any]]:
        """RECALL ``what`` (refs or sections), following ``next_offset`` until the last page."""
        items: list[dict[str, Any]] = []
        offset: int | None = 0
        while offset is not None:
            reply = await self.request({"t": T.RECALL, **what, "offset": offset})
            items.extend(reply.get("items", []))
            nxt = reply.get("next_offset")
            offset = nxt if isinstance(nxt, int) and nxt > offset else None
        return items

    async def search(
        self, query: str, *, limit: int = 50, offset: int = 0, session: str | None = None
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Text search (ASCII case-insensitive) in this agent's archive, newest first: (hits, the
        offset of the next page or None). A hit has ref, session, section, kind, pos, snippet."""
        msg: dict[str, Any] = {"t": T.RECALL, "query": query, "limit": limit, "offset": offset}
        if session is not None:
            msg["session"] = session
        reply = await self.request(msg)
        nxt = reply.get("next_offset")
        return list(reply.get("hits", [])), nxt if isinstance(nxt, int) else None

    async def compress(
        self, text: str, *, label: str = "", min_tokens: int = 0, target_tokens: int = 0
    ) -> dict[str, Any]:
        """COMPRESS: the daemon archives ``text`` (recallable like any original) and answers with its
        digest: {compressed, text, ref, section, tokens_before, tokens_after, method}; a text below
        ``min_tokens`` comes back as it is (compressed false). Reader connections (``reader=True``)."""
        options = {"label": label, "min_tokens": min_tokens, "target_tokens": target_tokens}
        msg: dict[str, Any] = {"t": T.COMPRESS, "text": text} | {k: v for k, v in options.items() if v}
        reply = await self.request(msg)
        return {k: v for k, v in reply.items() if k not in ("t", "re", "v")}

    def side_effect(self) -> int:
        """Record an effect outside the context (a file written, a command run): bumps ``epoch``."""
        self.epoch += 1
        return self.epoch

    async def checkpoint(self, name: str = "", *, note: str = "", overwrite: bool = False) -> dict[str, Any]:
        """Save the context (as the daemon mirrors it, at its current version) with ``epoch``;
        returns the checkpoint's metadata (name, version, epoch, tokens, sections, ...)."""
        msg: dict[str, Any] = {
            "t": T.CHECKPOINT,
            "op": "save",
            "epoch": self.epoch,
            "version": self.context.version,
        }
        if name:
            msg["name"] = name
        if note:
            msg["note"] = note
        if overwrite:
            msg["overwrite"] = True
        reply = await self.request(msg)
        return dict(reply["checkpoint"])

    async def checkpoints(self) -> list[dict[str, Any]]:
        """This agent's checkpoints (all its sessions), oldest first."""
        reply = await self.request({"t": T.CHECKPOINT, "op": "list"})
        return list(reply.get("checkpoints", []))

    async def show_checkpoint(
        self, name: str, *, sections: bool = False
    ) -> tuple[dict[str, Any], list[Section]]:
        """A checkpoint's metadata and, with ``sections``, its sections (all pages)."""
        reply = await self.request({"t": T.CHECKPOINT, "op": "show", "name": name, "sections": sections})
        meta = dict(reply["checkpoint"])
        wires = list(reply.get("sections", []))
        wires += await self._checkpoint_pages(name, reply.get("next_offset"))
        return meta, _sections(wires)

    async def drop_checkpoint(self, name: str) -> None:
        await self.request({"t": T.CHECKPOINT, "op": "drop", "name": name})

    async def restore(self, name: str, *, force: bool = False) -> dict[str, Any]:
        """Make checkpoint ``name`` the context again (here and in the daemon's mirror).

        Refused with LinkError ``epoch_changed`` when ``epoch`` moved since the checkpoint, unless
        ``force``. Returns the daemon's report: version, expected_tokens (at save), actual_tokens
        (the text recounted now), token_mismatch, forced, epoch_saved, epoch_now, expired_proposals
        — plus context_tokens, what ``link.context`` holds after the restore."""
        reply = await self.request(
            {
                "t": T.RESTORE,
                "name": name,
                "epoch": self.epoch,
                "force": force,
                "version": self.context.version,
            }
        )
        wires = list(reply.get("sections", []))
        wires += await self._checkpoint_pages(name, reply.get("next_offset"))
        self.context.reset(_sections(wires), int(reply["version"]))
        report = {k: v for k, v in reply.items() if k not in ("t", "re", "v", "sections", "next_offset")}
        report["context_tokens"] = self.context.tokens
        return report

    async def _checkpoint_pages(self, name: str, offset: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while isinstance(offset, int):
            page = await self.request(
                {"t": T.CHECKPOINT, "op": "show", "name": name, "sections": True, "offset": offset}
            )
            out += page.get("sections", [])
            nxt = page.get("next_offset")
            offset = nxt if isinstance(nxt, int) and nxt > offset else None
        return out

    async def status(self) -> dict[str, Any]:
        """This agent's state in the daemon (STATE: ``daemon`` and ``agents`` = [this agent])."""
        return await self.request({"t": T.STATUS})

    async def ping(self) -> float:
        """A HEARTBEAT round trip, in seconds."""
        t0 = time.perf_counter()
        await self.request({"t": T.HEARTBEAT})
        return time.perf_counter() - t0


def _sections(wires: Iterable[Any]) -> list[Section]:
    return [Section.from_wire(w, MAX_INBOUND) for w in wires]
