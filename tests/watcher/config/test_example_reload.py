"""watcher.config: the generated example documents every key; reload diffs."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from tests.watcher.config.cases import EXAMPLE, FULL, write
from watcher.config.settings import (
    RESTART_REQUIRED,
    AgentOverride,
    CompactionConfig,
    Config,
    ModelConfig,
    changed_keys,
    diff_restart_required,
    load,
)

# --- the documented example ------------------------------------------------------------------------


def test_example_loads_and_equals_the_defaults() -> None:
    assert load(EXAMPLE) == Config(source=str(EXAMPLE))


def test_example_documents_every_key() -> None:
    raw = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    sections = {"daemon", "model", "compaction", "metrics", "mqtt", "store"}
    assert set(raw) == sections
    text = EXAMPLE.read_text(encoding="utf-8")
    unset_by_default = {"low_watermark"}  # documented commented out: its default is "unset" (auto)
    for name in sections:
        fields = {f.name for f in dataclasses.fields(getattr(Config(), name))}
        assert set(raw[name]) == fields - unset_by_default, name
    assert "# low_watermark = " in text
    for f in dataclasses.fields(AgentOverride):
        assert f"# {f.name} = " in text, f.name


def test_example_agent_block_is_valid_once_uncommented(tmp_path: Path) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    block = text[text.index("# [agents.planner-bot]") :]
    uncommented = "\n".join(line.removeprefix("# ") for line in block.splitlines())
    cfg = load(write(tmp_path, text + uncommented))
    assert cfg.agents == {
        "planner-bot": AgentOverride(
            budget=128000,
            reserve=0.1,
            policy="manual",
            planner="recency",
            token="replace-with-a-long-random-secret",
        )
    }


@pytest.mark.parametrize("key", sorted(RESTART_REQUIRED))
def test_example_marks_restart_keys(key: str) -> None:
    section, name = key.split(".")
    text = EXAMPLE.read_text(encoding="utf-8")
    body = text[text.index(f"[{section}]") :]
    comment = body[: body.index(f"\n{name} = ")]
    assert comment.rstrip().endswith("restart"), key


# --- reload ----------------------------------------------------------------------------------------


def test_restart_required_keys_exist() -> None:
    cfg = Config()
    for key in RESTART_REQUIRED:
        section, name = key.split(".")
        assert hasattr(getattr(cfg, section), name)


def test_diff_restart_required(tmp_path: Path) -> None:
    old = load(None)
    assert diff_restart_required(old, old) == []
    assert diff_restart_required(old, load(write(tmp_path, FULL))) == [
        "daemon.socket",
        "daemon.state_dir",
        "daemon.max_frame_bytes",
        "model.n_ctx",
        "model.n_threads",
        "model.weights",
        "model.cache_dir",
        "metrics.listen",
        "store.synchronous",
    ]
    reloadable = dataclasses.replace(
        old,
        compaction=CompactionConfig(reserve=0.3),
        model=ModelConfig(path="/m.gguf"),
        agents={"bot": AgentOverride(budget=5000)},
    )
    assert diff_restart_required(old, reloadable) == []
    assert changed_keys(old, reloadable) == ["model.path", "compaction.reserve", "agents.bot"]
    assert changed_keys(reloadable, old) == ["model.path", "compaction.reserve", "agents.bot"]
