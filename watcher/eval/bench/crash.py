"""`compactd bench crash`: kill -9 a real daemon again and again while agents replay trajectories,
and check after every restart that nothing was lost, half-applied or leaked.

Each cycle: start `compactd run` (a subprocess, the same state directory every time), let the
agents (real AgentLinks, one token each) reattach and resync *on their own*, pause them, check,
resume them, and SIGKILL the daemon — at a random moment, or at a named crash point
(watcher.store.crashpoints: archived = originals committed while the summarizer runs, planned, before_send
= committed as sent but not on the wire, ack = an ACK received but not committed, checkpoint,
indexed = the search index committed a slice in its own file, the store's marks not yet updated).

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
import random
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from ipc.client import LinkError
from summarizer.digest import approx_tokens
from watcher.eval.bench.crashagents import Agent, CrashSettings, Tally
from watcher.eval.bench.crashchecks import (
    check_agent,
    check_isolation,
    integrity,
    operator_compacting,
    settled,
    synced,
)
from watcher.eval.bench.goals import BenchError, Goal, exercised, judge
from watcher.eval.harness import DaemonProcess, ReplayError
from watcher.eval.trajectories import Trajectory, TrajectoryError, load
from watcher.serve.recovery import same
from watcher.store.crashpoints import ENV_FILE as CRASH_FILE_ENV
from watcher.store.store import DB_NAME, connect_readonly

DEFAULT_TRAJECTORIES: Final = Path(__file__).resolve().parents[4] / "shared" / "trajectories"
KILL_MODES: Final = ("random", "archived", "planned", "before_send", "ack", "checkpoint", "indexed")


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
                settled(daemon.log_path, tally)
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
        settled(daemon.log_path, tally)
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
    if await operator_compacting(daemon.endpoint):
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
            and await synced(a)
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
    applied = out["proposals_applied"]
    return judge(
        out,
        [
            Goal("kills", sum(t.kills.values()), "==", s.cycles),
            Goal("lost_originals", exercised(len(t.lost), t.originals_checked > 0), "==", 0),
            Goal("half_applied", exercised(len(t.half), t.proposals_checked > 0 and applied > 0), "==", 0),
            Goal("lost_checkpoints", exercised(len(t.lost_cps), t.checkpoints_checked > 0), "==", 0),
            Goal("mirror_mismatches", t.mirror_mismatches, "==", 0),
            Goal("integrity_ok", exercised(out["integrity_ok"], len(t.integrity) > s.cycles), "==", True),
            Goal("cross_agent_refused_ratio", exercised(round(ratio, 4), t.cross_attempts > 0), "==", 1.0),
            Goal("resynced_agents", exercised(t.resynced, t.resync_expected > 0), "==", t.resync_expected),
            Goal("restores_ok", t.restores_ok, "==", s.agents),
            Goal("epoch_guardrail_ok", t.guardrails_ok, "==", s.agents),
        ],
    )
