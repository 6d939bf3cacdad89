"""`compactd bench crash`: kill -9 a real daemon again and again while agents replay trajectories,
and check after every restart that nothing was lost, half-applied or leaked.

Each cycle: start `compactd run` (a subprocess, the same state directory every time), let the
agents (real AgentLinks, one token each) reattach and resync *on their own*, pause them, check,
resume them, and SIGKILL the daemon — at a random moment, or at a named crash point
(watcher.store.crashpoints: archived = originals committed while the summarizer runs, planned, before_send
= committed as sent but not on the wire, ack = an ACK received but not committed, checkpoint).

The agents keep their own record of the truth: every proposal they applied with the exact sections
it replaced, and every checkpoint they saved with its exact sections. After each restart:

* ``lost_originals`` — distinct originals of applied proposals that RECALL does not return byte
  for byte (every applied proposal is checked again after every restart);
* ``half_applied`` — distinct proposals where the store and the agent disagree (applied but not
  ``acked``, ``acked`` but not applied, or a context holding a digest *and* a section it replaced);
* ``integrity_ok`` — PRAGMA integrity_check on the database after every kill;
* ``resynced_agents`` — agents that reattached and resynced by themselves (out of cycles × agents);
* ``lost_checkpoints`` — saved checkpoints that do not come back identical;
* ``cross_agent_*`` — each agent tries to reach every other agent's archive (by ref, section id,
  search), checkpoints (show, restore), STATUS, and to attach under its name (wrong or no token).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import secrets
import sqlite3
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import zmq
import zmq.asyncio

from ipc.client import AgentLink, LinkError
from ipc.protocol import Proposal, T, decode, encode
from ipc.sections import Section
from summarizer.digest import approx_tokens
from watcher.eval.harness import DaemonProcess, ReplayError
from watcher.eval.trajectories import Trajectory, TrajectoryError, load
from watcher.serve.recovery import same
from watcher.store.crashpoints import ENV_FILE as CRASH_FILE_ENV
from watcher.store.store import DB_NAME, check_integrity, connect_readonly

DEFAULT_TRAJECTORIES: Final = Path(__file__).resolve().parents[4] / "shared" / "trajectories"
KILL_MODES: Final = ("random", "archived", "planned", "before_send", "ack", "checkpoint")
CHECKPOINT_EVERY: Final = 5  # turns


class BenchError(RuntimeError):
    pass


@dataclass(frozen=True)
class CrashSettings:
    cycles: int = 30
    agents: int = 3
    model: bool = True
    seed: int = 1
    budget: int = 6000
    reserve: float = 0.2
    turn_interval: float = 0.05
    trajectories: tuple[Path, ...] = ()
    workdir: Path | None = None
    run_s: tuple[float, float] = (0.3, 2.5)  # random kills land this long after the checks
    crash_wait_s: float = 20.0  # an armed crash point not reached by then: SIGKILL from outside
    resync_wait_s: float = 30.0


@dataclass
class Applied:
    proposal: Proposal
    originals: tuple[Section, ...]


@dataclass
class Tally:
    kills: Counter[str] = field(default_factory=Counter)
    kills_while_compacting: int = 0
    # distinct things found wrong (each is checked again after every restart, counted once)
    lost: set[tuple[str, str, str]] = field(default_factory=set)  # (agent, ref, section id)
    half: set[tuple[str, str]] = field(default_factory=set)  # (agent, proposal)
    lost_cps: set[tuple[str, str]] = field(default_factory=set)  # (agent, checkpoint)
    originals_checked: int = 0
    proposals_checked: int = 0
    mirror_mismatches: int = 0
    checkpoints_checked: int = 0
    integrity: list[bool] = field(default_factory=list)
    resynced: int = 0
    resync_expected: int = 0
    resync_s: list[float] = field(default_factory=list)
    cross_attempts: int = 0
    cross_refused: int = 0
    cross_leaks: list[str] = field(default_factory=list)
    settled: Counter[str] = field(default_factory=Counter)
    restores_ok: int = 0
    guardrails_ok: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(text)


# --- the agents --------------------------------------------------------------------------------------


def _turns(agent: str, traj: Trajectory) -> Iterator[list[Section]]:
    """The trajectory's turns forever, with ids and groups unique to this agent and loop."""
    for loop in itertools.count():
        for i, turn in enumerate(traj.turns):
            if loop and i == 0:
                continue  # the system prompt and task only once
            yield [
                replace(s, id=f"{agent}.{loop}.{s.id}", group=f"{loop}.{s.group}" if s.group else "")
                for s in turn
            ]


class Agent:
    def __init__(self, name: str, token: str, endpoint: str, traj: Trajectory, s: CrashSettings) -> None:
        self.name = name
        self.token = token
        self.canary = f"canary-{name}-{secrets.token_hex(6)}"
        self.link = AgentLink(
            endpoint, agent=name, budget=s.budget, reserve=s.reserve, token=token, timeout_s=3.0
        )
        self.turns = _turns(name, traj)
        self.interval = s.turn_interval
        self.applied: dict[str, Applied] = {}
        self.checkpoints: dict[str, list[Section]] = {}
        self.errors: Counter[str] = Counter()
        self.turn = 0
        self._pause = asyncio.Event()
        self._resume = asyncio.Event()
        self._idle = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.link.connect()
        first = next(self.turns)
        marker = Section(f"{self.name}.canary", "user", f"Remember the code word {self.canary}.", tokens=12)
        await self.link.append(*first, marker, wait=True)
        self._task = asyncio.create_task(self._run(), name=f"crash-agent-{self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(LinkError):
            await self.link.close()

    async def pause(self) -> None:
        self._idle.clear()
        self._resume.clear()
        self._pause.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), 10.0)

    def resume(self) -> None:
        self._pause.clear()
        self._resume.set()

    async def _run(self) -> None:
        while True:
            if self._pause.is_set():
                self._idle.set()
                await self._resume.wait()
                continue
            await self._step()

    async def _step(self) -> None:
        await self.apply_queued()
        try:
            await self.link.append(*next(self.turns), wait=True)
        except LinkError as exc:
            self.errors[exc.code] += 1
            await asyncio.sleep(0.1)
        self.turn += 1
        if self.turn % CHECKPOINT_EVERY == 0:
            name = f"{self.name}-cp{self.turn}"
            try:
                await self.link.checkpoint(name)
                self.checkpoints[name] = list(self.link.context)
            except LinkError as exc:
                self.errors[f"checkpoint:{exc.code}"] += 1
        await asyncio.sleep(self.interval)

    async def apply_queued(self) -> None:
        while not self.link.proposals.empty():
            p = self.link.proposals.get_nowait()
            originals = tuple(s for i in p.replaces if (s := self.link.context.get(i)) is not None)
            try:
                ok = await self.link.apply(p)
            except LinkError as exc:
                self.errors[f"apply:{exc.code}"] += 1
                continue
            if ok:
                self.applied[p.proposal] = Applied(p, originals)


# --- checks ------------------------------------------------------------------------------------------


async def _synced(agent: Agent, limit_s: float = 5.0) -> bool:
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
    if not await _synced(agent):
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


async def _operator_compacting(endpoint: str) -> bool:
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


def _settled(log_path: Path, tally: Tally) -> None:
    for line in log_path.read_text(errors="replace").splitlines():
        if '"proposals_settled"' not in line:
            continue
        with contextlib.suppress(json.JSONDecodeError):
            ev = json.loads(line)
            for key in ("acked", "reoffered", "expired"):
                tally.settled[key] += len(ev.get(key, []))


# --- the run -----------------------------------------------------------------------------------------


def _trajectories(s: CrashSettings) -> list[Trajectory]:
    paths = list(s.trajectories)
    if not paths:
        mini = DEFAULT_TRAJECTORIES / "mini-swe-agent"
        paths = sorted(mini.glob("*.traj.json")) if mini.is_dir() else []
    if not paths:
        raise BenchError(f"no trajectories: give --trajectories (none found under {DEFAULT_TRAJECTORIES})")
    out: list[Trajectory] = []
    try:
        for p in paths:
            out += load(p, count=approx_tokens)
    except TrajectoryError as exc:
        raise BenchError(str(exc)) from exc
    return out


def _config(workdir: Path, tokens: dict[str, str]) -> Path:
    lines = ["[daemon]", "heartbeat_s = 1.0", ""]
    for name, token in tokens.items():
        lines += [f'[agents."{name}"]', f'token = "{token}"', ""]
    path = workdir / "compactd.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


async def run_crash(s: CrashSettings) -> dict[str, Any]:
    if s.cycles < 1 or s.agents < 2:
        raise BenchError("need at least 1 cycle and 2 agents (isolation is checked between agents)")
    trajs = _trajectories(s)
    rng = random.Random(s.seed)
    with contextlib.ExitStack() as stack:
        workdir = s.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="compactd-crash-"))
        )
        workdir.mkdir(parents=True, exist_ok=True)
        names = [f"crash-{i}" for i in range(s.agents)]
        tokens = {n: secrets.token_urlsafe(24) for n in names}
        config = str(_config(workdir, tokens))
        db_path = workdir / "state" / DB_NAME
        tally = Tally()
        t0 = time.monotonic()
        daemon = _start(workdir, config, s, 0)
        agents: list[Agent] = []
        try:
            await daemon.wait_ready()
            endpoint = daemon.endpoint
            for i, name in enumerate(names):
                agent = Agent(name, tokens[name], endpoint, trajs[i % len(trajs)], s)
                await agent.start()
                agents.append(agent)
            for cycle in range(1, s.cycles + 1):
                await _crash(daemon, rng.choice(KILL_MODES), rng, s, tally)
                ok = integrity(db_path)
                tally.integrity.append(ok)
                if not ok:
                    tally.problem(f"cycle {cycle}: PRAGMA integrity_check failed after the kill")
                _settled(daemon.log_path, tally)
                before = {a.name: a.link.reattaches for a in agents}
                daemon = _start(workdir, config, s, cycle)
                await daemon.wait_ready()
                ready = time.monotonic()
                await _await_resync(agents, before, ready, s, tally)
                await _check_all(agents, endpoint, db_path, tally)
            await _final(agents, tally)
        except ReplayError as exc:
            raise BenchError(str(exc)) from exc
        finally:
            for agent in agents:
                await agent.stop()
            daemon.stop()
        _settled(daemon.log_path, tally)
        tally.integrity.append(integrity(db_path))
        store = _store_summary(db_path)
    return _result(s, tally, store, time.monotonic() - t0, agents)


def _arm_file(workdir: Path) -> Path:
    return workdir / "crashpoint"


def _start(workdir: Path, config: str, s: CrashSettings, n: int) -> DaemonProcess:
    """Start the daemon, unarmed: _crash arms a crash point (by writing the file) after the checks."""
    _arm_file(workdir).unlink(missing_ok=True)
    env = {CRASH_FILE_ENV: str(_arm_file(workdir))}
    return DaemonProcess(workdir, config, s.model, log_name=f"daemon-{n:02d}.log", env=env)


async def _crash(
    daemon: DaemonProcess, mode: str, rng: random.Random, s: CrashSettings, tally: Tally
) -> None:
    """Let the agents run until the daemon dies: SIGKILL from outside at a random moment, or by
    its own hand at the crash point it was armed with (SIGKILL from outside if it is not reached
    within crash_wait_s: counted as a random kill)."""
    if mode == "random":
        await asyncio.sleep(rng.uniform(*s.run_s))
    else:
        _arm_file(daemon.log_path.parent).write_text(f"{mode}:{rng.randint(1, 3)}", encoding="ascii")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.to_thread(daemon.proc.wait), s.crash_wait_s)
        if daemon.proc.poll() is not None:
            daemon.kill()  # reap it (it already died by SIGKILL)
            tally.kills[mode] += 1
            return
        mode = "random"
    if await _operator_compacting(daemon.endpoint):
        tally.kills_while_compacting += 1
    daemon.kill()
    tally.kills[mode] += 1


async def _await_resync(
    agents: list[Agent], before: dict[str, int], ready: float, s: CrashSettings, tally: Tally
) -> None:
    tally.resync_expected += len(agents)
    pending = {a.name for a in agents}
    deadline = ready + s.resync_wait_s
    while pending and time.monotonic() < deadline:
        for a in agents:
            if a.name in pending and a.link.reattaches > before[a.name]:
                pending.discard(a.name)
                tally.resynced += 1
                tally.resync_s.append(time.monotonic() - ready)
        await asyncio.sleep(0.05)
    for name in pending:
        tally.problem(f"{name} did not reattach within {s.resync_wait_s:g} s")


async def _check_all(agents: list[Agent], endpoint: str, db_path: Path, tally: Tally) -> None:
    await asyncio.gather(*(a.pause() for a in agents))
    try:
        for a in agents:
            await check_agent(a, db_path, tally)
        await check_isolation(agents, endpoint, tally)
    finally:
        for a in agents:
            a.resume()


async def _final(agents: list[Agent], tally: Tally) -> None:
    """After the last restart: restore each agent's newest checkpoint and compare; then check the
    epoch guardrail (a restore after a side effect is refused unless forced)."""
    await asyncio.gather(*(a.pause() for a in agents))
    for a in agents:
        if not a.checkpoints:
            tally.problem(f"{a.name}: saved no checkpoint")
            continue
        await a.apply_queued()
        a.link.timeout_s = 30.0  # a restore of a long context on a busy machine: no hurry here
        name, sections = list(a.checkpoints.items())[-1]
        try:
            report = await a.link.restore(name)
        except LinkError as exc:
            tally.problem(f"{a.name}: restore {name}: {exc}")
            continue
        got = list(a.link.context)
        if (
            len(got) == len(sections)
            and all(same(x, y) for x, y in zip(got, sections, strict=True))
            and report["expected_tokens"] == report["context_tokens"]
            and await _synced(a)
        ):
            tally.restores_ok += 1
        else:
            tally.problem(f"{a.name}: restore of {name} did not reproduce the checkpoint: {report}")
        a.link.side_effect()
        try:
            await a.link.restore(name)
            tally.problem(f"{a.name}: restore after a side effect was not refused")
        except LinkError as exc:
            if exc.code == "epoch_changed":
                forced = await a.link.restore(name, force=True)
                if forced["forced"]:
                    tally.guardrails_ok += 1


def _store_summary(db_path: Path) -> dict[str, Any]:
    db = connect_readonly(db_path)
    try:
        states = dict(db.execute("SELECT state, COUNT(*) FROM proposals GROUP BY state").fetchall())
        entries = db.execute("SELECT COUNT(*), COALESCE(SUM(sections), 0) FROM archive").fetchone()
        cps = db.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0]
    finally:
        db.close()
    return {
        "proposals": states,
        "archive_entries": entries[0],
        "archived_sections": entries[1],
        "checkpoints": cps,
        "file_bytes": db_path.stat().st_size,
    }


def _result(
    s: CrashSettings, t: Tally, store: dict[str, Any], seconds: float, agents: list[Agent]
) -> dict[str, Any]:
    ratio = t.cross_refused / t.cross_attempts if t.cross_attempts else 0.0
    out: dict[str, Any] = {
        "cycles": s.cycles,
        "agents": s.agents,
        "model": s.model,
        "seed": s.seed,
        "kills": dict(t.kills),
        "kills_while_compacting": t.kills_while_compacting,
        "lost_originals": len(t.lost),
        "originals_checked": t.originals_checked,
        "half_applied": len(t.half),
        "proposals_checked": t.proposals_checked,
        "proposals_applied": sum(len(a.applied) for a in agents),
        "mirror_mismatches": t.mirror_mismatches,
        "lost_checkpoints": len(t.lost_cps),
        "checkpoints_checked": t.checkpoints_checked,
        "integrity_ok": bool(t.integrity) and all(t.integrity),
        "integrity_checks": len(t.integrity),
        "resynced_agents": t.resynced,
        "resync_expected": t.resync_expected,
        "resync_s_p50": round(statistics.median(t.resync_s), 3) if t.resync_s else None,
        "resync_s_max": round(max(t.resync_s), 3) if t.resync_s else None,
        "settled_after_restart": dict(t.settled),
        "cross_agent_attempts": t.cross_attempts,
        "cross_agent_refused": t.cross_refused,
        "cross_agent_refused_ratio": round(ratio, 4),
        "cross_agent_leaks": t.cross_leaks,
        "restores_ok": t.restores_ok,
        "epoch_guardrail_ok": t.guardrails_ok,
        "agent_errors": {a.name: dict(a.errors) for a in agents},
        "store": store,
        "seconds": round(seconds, 1),
        "problems": t.problems,
    }
    out["goals_met"] = (
        out["lost_originals"] == 0
        and out["half_applied"] == 0
        and out["integrity_ok"]
        and ratio == 1.0
        and t.resynced == t.resync_expected
    )
    return out
