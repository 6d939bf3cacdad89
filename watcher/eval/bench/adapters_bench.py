"""``compactd bench adapters``: every framework adapter over a real trajectory, and its overhead.

1. **Window** — each adapter plays ``turns`` turns of a real trajectory through its framework's
   real agent loop (watcher.eval.bench.players) against a real daemon (no model) at a small
   ``budget``: every model call must stay within it, every request must be valid, no call waits.
2. **Overhead** — each framework with and without its adapter, interleaved (``rounds`` times each),
   on a history of at least ``history_tokens`` tokens (one whole trajectory as the starting
   messages, then the steps of another), with ``overhead_llm_time`` of model time per call. The
   adapter's own time per model call (after the first,
   which mirrors the whole history once) must stay within ``overhead_ms`` at p99; the framework's
   own time between two model calls is reported side by side, with and without the adapter.

Exits non-zero when a goal is missed (``goals_met``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ipc import AgentLink, SyncAgentLink
from ipc.integrations.core import Applied
from watcher.eval.bench.adapters import Chat, Played, chat_turns, request_tokens
from watcher.eval.bench.goals import Goal, judge
from watcher.eval.bench.players import play_langchain, play_miniswe, play_openai_agents
from watcher.eval.harness import running_daemon
from watcher.eval.trajectories import load

ADAPTERS = (
    "langchain:state",
    "langchain:request",
    "openai-agents:filter",
    "mini-swe-agent:agent",
    "mini-swe-agent:model",
    "openhands:condenser",
)
# openhands-sdk needs Python >= 3.12: without it here, its runs go to this Python (./dev.sh setup)
OPENHANDS_PYTHON = Path(__file__).resolve().parents[3] / ".venv-openhands" / "bin" / "python"


@dataclass(frozen=True)
class AdapterBenchSettings:
    trajectory: Path
    history: Path  # the trajectory whose turns form the long history of the overhead part
    turns: int = 60
    budget: int = 20_000
    reserve: float = 0.3
    llm_time: float = 0.2
    history_tokens: int = 100_000
    overhead_steps: int = 40
    rounds: int = 3
    overhead_ms: float = 1.0
    # model time between calls in the overhead part: far below a real model's, but not zero (back to
    # back, the link's thread still encoding the previous DELTA competes for the GIL with the call)
    overhead_llm_time: float = 0.02
    adapters: tuple[str, ...] = ADAPTERS  # framework:mode, a subset of ADAPTERS


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _ms(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(_pct(xs, 0.5) * 1e3, 3), "p99_ms": round(_pct(xs, 0.99) * 1e3, 3), "n": len(xs)}


async def _play(
    name: str,
    endpoint: str,
    agent: str,
    turns: list[list[Chat]],
    s: AdapterBenchSettings,
    budget: int,
    llm_time: float,
) -> Played:
    framework, mode = name.split(":")
    if framework == "openhands":
        return await _play_openhands(endpoint, agent, turns, s, budget, mode, llm_time)
    if framework == "openai-agents":
        if mode == "none":
            return await play_openai_agents(None, turns, mode="none", llm_time=llm_time)
        async with AgentLink(endpoint, agent, budget, reserve=s.reserve) as link:
            return await play_openai_agents(link, turns, mode=mode, llm_time=llm_time)
    player: Callable[..., Played] = play_langchain if framework == "langchain" else play_miniswe
    if mode == "none":
        return await asyncio.to_thread(player, None, turns, mode="none", llm_time=llm_time)
    sync = SyncAgentLink(endpoint, agent, budget, reserve=s.reserve)
    await asyncio.to_thread(sync.connect)
    try:
        return await asyncio.to_thread(player, sync, turns, mode=mode, llm_time=llm_time)
    finally:
        await asyncio.to_thread(sync.close)


async def _play_openhands(
    endpoint: str,
    agent: str,
    turns: list[list[Chat]],
    s: AdapterBenchSettings,
    budget: int,
    mode: str,
    llm_time: float,
) -> Played:
    """One run in a child process (watcher.eval.bench.players_openhands): this Python when it has
    the SDK, else the OpenHands venv's; the with/without runs of the overhead part are then alike."""
    spec = {"endpoint": endpoint, "agent": agent, "budget": budget, "reserve": s.reserve}
    spec |= {"turns": turns, "mode": mode, "llm_time": llm_time}
    python = os.environ.get("COMPACTD_OPENHANDS_PYTHON", str(OPENHANDS_PYTHON))
    if importlib.util.find_spec("openhands") is not None:
        python = sys.executable
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(spec, f)
        f.flush()
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENHANDS_SUPPRESS_BANNER": "1"}
        cmd = [python, "-m", "watcher.eval.bench.players_openhands", f.name]
        try:
            proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE, env=env)
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"{python}: no Python with openhands-sdk (./dev.sh setup makes it)"
            ) from exc
        out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the OpenHands player exited with {proc.returncode}")
    got = json.loads(out.decode().strip().splitlines()[-1])
    applied = got.pop("applied")
    played = Played(**got)
    played.applied = [Applied("", (), ()) for _ in applied]  # counted only
    return played


def _long_history(s: AdapterBenchSettings) -> list[list[Chat]]:
    """Turn 0 = a whole trajectory (>= history_tokens), then the steps of the measured one."""
    hist = load(s.history)[0]
    flat = [  # as plain messages: every framework takes them as its starting input
        {"role": "system" if m["role"] == "system" else "user", "content": m["content"]}
        for turn in chat_turns(hist, len(hist.turns))
        for m in turn
    ]
    if request_tokens(flat) < s.history_tokens:
        raise ValueError(f"{s.history} holds {request_tokens(flat)} tokens, fewer than {s.history_tokens}")
    steps = chat_turns(load(s.trajectory)[0], s.overhead_steps)[1:]
    return [flat, *steps]


async def run_adapters_bench(
    s: AdapterBenchSettings, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    turns = chat_turns(load(s.trajectory)[0], s.turns)
    result: dict[str, Any] = {
        "settings": {k: str(v) for k, v in s.__dict__.items()},
        "window": {},
        "overhead": {},
    }
    goals: list[Goal] = []
    with tempfile.TemporaryDirectory(prefix="compactd-bench-adapters-") as tmp:
        async with running_daemon(Path(tmp), None, model=False) as daemon:
            for i, name in enumerate(s.adapters):
                played = await _play(name, daemon.endpoint, f"window-{i}", turns, s, s.budget, s.llm_time)
                summary = played.summary(s.budget) | {"adapter_step": _ms(played.step_s[1:])}
                result["window"][name] = summary
                goals += [
                    Goal(f"window {name}: calls over the window", summary["over_budget"], "==", 0),
                    Goal(f"window {name}: invalid requests", summary["invalid"], "==", 0),
                    Goal(f"window {name}: calls that waited", summary["waits"], "==", 0),
                    Goal(f"window {name}: calls made", played.calls, "==", s.turns + 1),
                    # no digest applied: the window goal was not exercised
                    Goal(f"window {name}: digests applied", summary["compactions"], ">", 0),
                ]
                progress(f"window {name}: {summary}")
            long = _long_history(s)
            big = 4 * s.history_tokens  # no compaction here: the history itself is measured
            for name in s.adapters:
                framework = name.split(":")[0]
                steps: list[float] = []
                with_s: list[float] = []
                without_s: list[float] = []
                for r in range(s.rounds):
                    t = s.overhead_llm_time
                    base = await _play(f"{framework}:none", daemon.endpoint, "", long, s, big, t)
                    got = await _play(name, daemon.endpoint, f"overhead-{name}-{r}", long, s, big, t)
                    without_s += base.call_s
                    with_s += got.call_s
                    steps += got.step_s[1:]  # the first call mirrors the whole history once
                with_, without = _ms(with_s), _ms(without_s)
                entry: dict[str, Any] = {
                    "history_tokens": request_tokens(long[0]),
                    "adapter_step": _ms(steps),
                    "framework_between_calls_with": with_,
                    "framework_between_calls_without": without,
                    "p99_difference_ms": round(with_["p99_ms"] - without["p99_ms"], 3),
                }
                result["overhead"][name] = entry
                goals.append(
                    Goal(f"overhead {name}: p99 ms", entry["adapter_step"]["p99_ms"], "<=", s.overhead_ms)
                )
                progress(f"overhead {name}: {entry}")
    return judge(result, goals)
