"""An agent attaches (HELLO: version, identity, settings, its session and policy chosen once) and
detaches (BYE); a reload re-resolves the settings of attached agents."""

from __future__ import annotations

from typing import Any

from ipc.protocol import SUPPORTED_VERSIONS, E, ProtocolError, T, negotiate, parse_hello
from watcher.config.settings import Config, resolve_agent
from watcher.observe import logs
from watcher.planning.planner import Watermarks
from watcher.planning.scoring import Scorer, score_params
from watcher.serve import limits
from watcher.serve.auth import AuthError, authenticate
from watcher.serve.hub import Hub
from watcher.serve.session import Session
from watcher.store.store import ArchiveView

log = logs.get("compactd.server")
reload_log = logs.get("compactd.reload")


def hello(hub: Hub, peer: bytes, msg: dict[str, Any], ref: int | None) -> None:
    h = parse_hello(msg)
    chosen = negotiate(h.versions, ref)
    cfg = hub.cfg
    try:  # identity from authentication, not from the claimed name (watcher.serve.auth)
        ident = authenticate(h, hub.peer_info, cfg)
    except AuthError as exc:
        log.warning("hello_refused", agent=h.agent, reason=str(exc))
        raise ProtocolError(E.UNAUTHORIZED, f"HELLO: {exc}", ref) from None
    try:
        eff = resolve_agent(
            cfg,
            h.agent,
            requested_budget=h.budget,
            requested_reserve=h.reserve,
            requested_policy=h.policy,
            requested_planner=h.planner,
        )
    except ValueError as exc:
        raise ProtocolError(E.INVALID, f"HELLO: {exc}", ref) from None
    budget, reserve, policy = eff.budget, eff.reserve, eff.policy
    marks = Watermarks(budget, reserve, eff.low_watermark)
    old = hub.agents.get(h.agent)
    if old is None:
        limits.check_agents(cfg.daemon, len(hub.agents), h.agent, ref)
    if old is not None:
        hub.by_peer.pop(old.peer, None)
    prev = hub.by_peer.get(peer)  # this connection was attached as another agent
    if prev is not None and hub.agents.get(prev.agent) is prev:
        hub.agents.pop(prev.agent, None)
    state = Session(h.agent, h.session, peer, marks, policy, planner=hub.policies(eff.planner))
    state.tokenizer = h.tokenizer
    state.scorer = Scorer(score_params(cfg.compaction))
    state.archive = ArchiveView(hub.store.archive, ident.agent, h.session)  # durable, all sessions
    state.ids = hub.store.ids  # refs and proposal ids numbered by the store, never repeated
    _attach_store(hub, state, h.resume, ident.method)
    hub.agents[h.agent] = state
    hub.by_peer[peer] = state
    log.info("agent_attached", agent=h.agent, session=h.session, budget=budget, reserve=reserve)
    hub.send(
        peer,
        {
            "t": T.WELCOME,
            "re": ref,
            "version": chosen,
            "versions": list(SUPPORTED_VERSIONS),
            "agent": h.agent,
            "session": h.session,
            "budget": budget,
            "reserve": reserve,
            "policy": policy,
            "planner": eff.planner,
            "high_watermark": marks.high,
            "low_watermark": marks.low,
            "context_version": state.ctx.version,
            "max_frame": hub.max_frame,
            "heartbeat_s": cfg.daemon.heartbeat_s,
            "agent_timeout_s": cfg.daemon.agent_timeout_s,
            "tokenizer": tokenizer_name(hub),
            "resumed": h.resume,
        },
    )


def _attach_store(hub: Hub, state: Session, resume: bool, method: str) -> None:
    """Record the attach; settle what a previous connection of this agent left open. A resuming
    agent sends its context next (SNAPSHOT): its session's open proposals are settled then."""
    hub.store.agents.touch(state.agent, state.session, method)
    if resume:
        state.synced = False
        hub.store.proposals.expire_open(
            state.agent, except_session=state.session, reason="the agent resumed another session"
        )
    else:
        hub.store.proposals.expire_open(state.agent, reason="the agent attached afresh")


def tokenizer_name(hub: Hub) -> str:
    """How the daemon counts sections sent without ``tokens`` (WELCOME.tokenizer)."""
    engine = hub.summarizer.engine
    if engine is not None and hub.summarizer.count == engine.count_tokens:
        return f"gguf:{engine.settings.path.rsplit('/', 1)[-1]}"
    return "approx:chars/3"


def bye(hub: Hub, state: Session, msg: dict[str, Any], ref: int | None) -> None:
    hub.by_peer.pop(state.peer, None)
    hub.agents.pop(state.agent, None)
    hub.store.proposals.expire_open(state.agent, reason="the agent said BYE")  # its archive stays
    log.info("agent_detached", agent=state.agent)
    hub.send(state.peer, {"t": T.BYE, "re": ref} if ref is not None else {"t": T.BYE})


def resolve_attached(hub: Hub, cfg: Config) -> None:
    """Attached agents that an ``[agents.<id>]`` table names get its budget, reserve, policy and
    planner now; what the table does not set keeps its running value (a reload)."""
    for state in hub.agents.values():
        override = cfg.agents.get(state.agent)
        if override is None:
            continue
        try:
            eff = resolve_agent(
                cfg,
                state.agent,
                requested_budget=state.marks.budget,
                requested_reserve=state.marks.reserve,
                requested_policy=state.policy,
            )
        except ValueError as exc:
            reload_log.warning("agent_settings_kept", agent=state.agent, error=str(exc))
            continue
        marks = Watermarks(eff.budget, eff.reserve, eff.low_watermark)
        planner = override.planner or state.planner.name
        if state.apply_settings(marks, eff.policy, hub.policies(planner)):
            reload_log.info(
                "agent_settings_changed",
                agent=state.agent,
                budget=eff.budget,
                reserve=eff.reserve,
                policy=eff.policy,
                planner=planner,
            )
