"""The checks of `compactd bench crash` after every restart: originals, proposals, checkpoints
against what each agent holds; isolation between agents; the database's integrity."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sqlite3
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from ipc.client import AgentLink, LinkError
from ipc.protocol import T, decode, encode
from watcher.eval.bench.crashagents import Agent, Tally
from watcher.serve.recovery import same
from watcher.store.store import check_integrity, connect_readonly

# --- checks ------------------------------------------------------------------------------------------


async def synced(agent: Agent, limit_s: float = 5.0) -> bool:
    """Wait until the daemon's mirror equals the agent's context (every ACK and resync processed)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            st = (await agent.link.status())["agents"][0]
        except (LinkError, KeyError, IndexError):
            await asyncio.sleep(0.1)
            continue
        ctx = agent.link.context
        if st.get("synced") and st["version"] == ctx.version and st["tokens"] == ctx.tokens:
            return True
        await asyncio.sleep(0.1)
    return False


def _store_states(db_path: Path, agent: str) -> dict[str, str]:
    db = connect_readonly(db_path)
    try:
        rows = db.execute("SELECT proposal, state FROM proposals WHERE agent = ?", (agent,))
        return {pid: state for pid, state in rows}
    finally:
        db.close()


async def check_agent(agent: Agent, db_path: Path, tally: Tally) -> None:
    if not await synced(agent):
        tally.mirror_mismatches += 1
        tally.problem(f"{agent.name}: mirror not in step with the agent's context")
    ctx = agent.link.context
    # originals: every proposal the agent applied comes back byte for byte
    for pid, a in agent.applied.items():
        ref = a.proposal.archive[0]
        try:
            got = (await agent.link.recall(ref)).get(ref, [])
        except LinkError as exc:
            got = []
            tally.problem(f"{agent.name}: RECALL {ref} ({pid}) failed: {exc}")
        by_id = {s.id: s for s in got}
        for orig in a.originals:
            tally.originals_checked += 1
            back = by_id.get(orig.id)
            if back is None or not same(back, orig) or back.tokens != orig.tokens:
                tally.lost.add((agent.name, ref, orig.id))
                tally.problem(f"{agent.name}: original {orig.id} of {ref} not returned intact")
    # proposals: the store agrees with the agent, and no context holds both sides of one
    states = _store_states(db_path, agent.name)
    for pid, a in agent.applied.items():
        tally.proposals_checked += 1
        bad = states.get(pid) != "acked"
        new_ids = {s.id for s in a.proposal.digest}
        if any(s.id in ctx for s in a.proposal.digest) and any(
            i in ctx for i in set(a.proposal.replaces) - new_ids
        ):
            bad = True
        if bad:
            tally.half.add((agent.name, pid))
            tally.problem(f"{agent.name}: {pid} applied by the agent, store says {states.get(pid)!r}")
    for pid, state in states.items():
        if state == "acked" and pid not in agent.applied:
            tally.proposals_checked += 1
            tally.half.add((agent.name, pid))
            tally.problem(f"{agent.name}: {pid} acked in the store, never applied by the agent")
    # checkpoints come back identical
    for name, sections in agent.checkpoints.items():
        tally.checkpoints_checked += 1
        try:
            _, saved = await agent.link.show_checkpoint(name, sections=True)
        except LinkError as exc:
            saved = []
            tally.problem(f"{agent.name}: checkpoint {name}: {exc}")
        if len(saved) != len(sections) or not all(
            same(x, y) and x.tokens == y.tokens for x, y in zip(saved, sections, strict=False)
        ):
            tally.lost_cps.add((agent.name, name))
            tally.problem(f"{agent.name}: checkpoint {name} did not come back identical")


Attempt = tuple[str, Coroutine[Any, Any, Any], Callable[[Any], bool]]


def _attempts(a: Agent, b: Agent, endpoint: str) -> list[Attempt]:
    """What ``a`` tries against ``b``: (what, the request, does its answer hold b's data?)."""
    link = a.link
    out: list[Attempt] = []
    for x in list(b.applied.values())[:2]:
        ref = x.proposal.archive[0]
        out.append((f"{a.name} RECALL ref {ref} of {b.name}", link.recall(ref), bool))
        claim = link.request({"t": T.RECALL, "refs": [ref], "agent": b.name})
        out.append((f"{a.name} RECALL ref {ref} claiming {b.name}", claim, lambda r: bool(r.get("items"))))
        sid = x.originals[0].id
        out.append((f"{a.name} RECALL section {sid} of {b.name}", link.recall_sections(sid), bool))
    out.append((f"{a.name} search for {b.name}'s canary", link.search(b.canary), lambda r: bool(r[0])))
    for cp in list(b.checkpoints)[-1:]:
        out.append((f"{a.name} show {cp}", link.show_checkpoint(cp, sections=True), bool))
        steal = link.request({"t": T.RESTORE, "name": cp, "epoch": 0, "agent": b.name})
        out.append((f"{a.name} RESTORE {cp} claiming {b.name}", steal, _always))
        forced = link.request({"t": T.RESTORE, "name": cp, "epoch": 0, "force": True})
        out.append((f"{a.name} RESTORE {cp} (forced)", forced, _always))
    status = link.request({"t": T.STATUS, "agent": b.name})
    out.append((f"{a.name} STATUS of {b.name}", status, lambda r: _lists(r, b.name)))
    for token, how in ((a.token, "the wrong"), ("", "no")):
        out.append((f"HELLO as {b.name} with {how} token", _impostor(endpoint, b.name, token), _always))
    return out


def _always(_: Any) -> bool:
    return True


def _lists(reply: dict[str, Any], agent: str) -> bool:
    return any(x.get("agent") == agent for x in reply.get("agents", []))


async def check_isolation(agents: list[Agent], endpoint: str, tally: Tally) -> None:
    """Every agent tries to reach every other agent's rows; each attempt must get nothing: an
    ERROR, or an answer without any of the other agent's data."""
    for a, b in itertools.permutations(agents, 2):
        for what, call, leaked in _attempts(a, b, endpoint):
            tally.cross_attempts += 1
            try:
                result = await call
            except LinkError:
                tally.cross_refused += 1
                continue
            if leaked(result):
                tally.cross_leaks.append(what)
            else:
                tally.cross_refused += 1


async def _impostor(endpoint: str, agent: str, token: str) -> dict[str, Any]:
    link = AgentLink(endpoint, agent=agent, budget=4000, token=token, timeout_s=3.0, heartbeat=False)
    try:
        return await link.connect()
    finally:
        await link.close(bye=False)


async def operator_compacting(endpoint: str) -> bool:
    """Is any agent's compaction job running (asked as the operator, like `compactd status`)?"""
    ctx = zmq.asyncio.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        await sock.send(encode({"t": T.STATUS, "id": 1}))
        reply = decode(await asyncio.wait_for(sock.recv(), 0.5))
        return any(a.get("compacting") for a in reply.get("agents", []))
    except (TimeoutError, zmq.ZMQError):
        return False
    finally:
        sock.close(0)


def integrity(db_path: Path) -> bool:
    """PRAGMA integrity_check as the next start sees the file (WAL recovered on open)."""
    db = sqlite3.connect(str(db_path), timeout=5.0)
    try:
        return not check_integrity(db)
    finally:
        db.close()


def settled(log_path: Path, tally: Tally) -> None:
    for line in log_path.read_text(errors="replace").splitlines():
        if '"proposals_settled"' not in line:
            continue
        with contextlib.suppress(json.JSONDecodeError):
            ev = json.loads(line)
            for key in ("acked", "reoffered", "expired"):
                tally.settled[key] += len(ev.get(key, []))
