"""watcher.config: per-agent resolution and the address helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.watcher.config.cases import FULL, write
from watcher.config.settings import (
    Config,
    ResolvedAgent,
    load,
    low_ratio,
    parse_listen,
    parse_mqtt_url,
    resolve_agent,
)

# --- per-agent resolution --------------------------------------------------------------------------


def test_resolve_agent_defaults() -> None:
    got = resolve_agent(Config(), "anyone")
    assert got == ResolvedAgent(
        budget=32000, reserve=0.15, policy="auto", planner="optimistic", low_watermark=0.7
    )
    assert got.high_water_tokens == 27200
    assert got.low_water_tokens == 22400


def test_resolve_agent_requests_win_over_defaults() -> None:
    got = resolve_agent(
        Config(), "a", requested_budget=8000, requested_reserve=0.25, requested_policy="manual"
    )
    assert (got.budget, got.reserve, got.policy) == (8000, 0.25, "manual")


def test_resolve_agent_config_overrides_win_over_requests(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, FULL))
    got = resolve_agent(
        cfg, "planner-bot", requested_budget=8000, requested_reserve=0.3, requested_policy="auto"
    )
    assert got == ResolvedAgent(
        budget=128000, reserve=0.1, policy="off", planner="optimistic", low_watermark=0.5
    )
    # an override with only a token leaves the requests in charge
    got = resolve_agent(cfg, "ci bot", requested_budget=9000)
    assert got == ResolvedAgent(
        budget=9000, reserve=0.2, policy="manual", planner="recency", low_watermark=0.5
    )
    # an overridden key's request is not used, so not validated either
    assert resolve_agent(cfg, "planner-bot", requested_reserve=0.99).reserve == 0.1


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"requested_budget": 0}, "requested budget must be a positive integer, got 0"),
        ({"requested_budget": True}, "requested budget must be a positive integer, got True"),
        ({"requested_reserve": 0.0}, "requested reserve must be in (0, 0.8), got 0.0"),
        ({"requested_reserve": 0.85}, "requested reserve must be in (0, 0.8), got 0.85"),
        ({"requested_policy": "never"}, "requested policy must be one of auto, manual, off, got 'never'"),
    ],
)
def test_resolve_agent_rejects_bad_requests(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        resolve_agent(Config(), "a", **kwargs)  # type: ignore[arg-type]
    assert str(info.value) == fragment


# --- address helpers -------------------------------------------------------------------------------


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    assert parse_listen("metrics.lan:80") == ("metrics.lan", 80)
    for bad in ("", "9464", ":9464", "host:", "host:0", "host:65536", "::1:9464", "host:９４"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_parse_mqtt_url() -> None:
    assert parse_mqtt_url("mqtt://broker") == ("broker", 1883)
    assert parse_mqtt_url("mqtt://broker:1884/") == ("broker", 1884)
    assert parse_mqtt_url("mqtt://[::1]:1884") == ("::1", 1884)
    for bad in (
        "",
        "broker:1883",
        "mqtts://broker",
        "mqtt://",
        "mqtt://u:p@broker",
        "mqtt://b/x",
        "mqtt://b:x",
    ):
        with pytest.raises(ValueError):
            parse_mqtt_url(bad)


def test_the_auto_low_watermark_follows_the_reserve(tmp_path: Path) -> None:
    """Unset, the low watermark is min(0.7, 1 - reserve - 0.15): any reserve below 0.8 works, and a
    larger reserve keeps a band of 0.15 under its high watermark; set, it is used as is."""
    assert low_ratio(Config().compaction, 0.15) == 0.7
    assert low_ratio(Config().compaction, 0.3) == 0.55
    assert low_ratio(Config().compaction, 0.79) == 0.06
    assert resolve_agent(Config(), "a", requested_reserve=0.5).low_watermark == 0.35
    cfg = load(write(tmp_path, "[compaction]\nreserve = 0.5\n[agents.bot]\nreserve = 0.3\n"))
    assert resolve_agent(cfg, "x").low_watermark == 0.35
    assert resolve_agent(cfg, "bot").low_watermark == 0.55
    fixed = load(write(tmp_path, "[compaction]\nlow_watermark = 0.5\n"))
    assert resolve_agent(fixed, "x", requested_reserve=0.3).low_watermark == 0.5
    with pytest.raises(ValueError, match=r"requested reserve must be in \(0, 0.5\)"):
        resolve_agent(fixed, "x", requested_reserve=0.5)
