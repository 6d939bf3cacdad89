"""Trajectory loaders, against the 12 real trajectories in /work/shared/trajectories."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from ipc.sections import Section
from watcher.eval.trajectories import Trajectory, TrajectoryError, load, load_many

DATA = Path(__file__).resolve().parents[4] / "shared" / "trajectories"

MINI_MESSAGES = {  # SOURCES.md: messages per mini-swe-agent file
    "scikit-learn__scikit-learn-25102": 88,
    "pytest-dev__pytest-6197": 186,
    "sphinx-doc__sphinx-9258": 218,
    "django__django-15629": 104,
    "pylint-dev__pylint-6528": 196,
    "sympy__sympy-13091": 260,
    "psf__requests-1142": 144,
}
PONYC = ["ponylang__ponyc-4595", "ponylang__ponyc-4593", "ponylang__ponyc-4588"]
PONYC_EVENTS = [49, 70, 103]  # one `recall` action each is skipped (it repeats the task)
CALL_KINDS = {"assistant", "tool_call"}


def all_files() -> list[Path]:
    return sorted(DATA.glob("*/*.traj.json")) + sorted(DATA.glob("*/*.jsonl")) + sorted(DATA.glob("*/*.traj"))


@pytest.fixture(scope="module")
def corpus() -> list[Trajectory]:
    return load_many(all_files())


def by_name(corpus: list[Trajectory], name: str) -> Trajectory:
    (found,) = [t for t in corpus if t.name == name]
    return found


def raw_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_data_dir_is_the_shared_corpus() -> None:
    # shared/ sits beside the checkout (here and in CI), wherever that checkout is
    assert (DATA / "SOURCES.md").is_file()
    assert DATA.parent.name == "shared"
    assert len(all_files()) == 10


def test_every_file_loads(corpus: list[Trajectory]) -> None:
    assert len(corpus) == 12
    formats = {t.name: t.fmt for t in corpus}
    assert {n for n, f in formats.items() if f == "mini-swe-agent"} == set(MINI_MESSAGES)
    assert {n for n, f in formats.items() if f == "openhands"} == {*PONYC, "alibaba__fastjson2-2775"}
    assert formats["pydicom__pydicom-1458"] == "swe-agent"


def test_loading_everything_is_fast() -> None:
    start = time.perf_counter()
    load_many(all_files())
    assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize("name", sorted(MINI_MESSAGES))
def test_mini_swe_agent_one_section_per_message(name: str) -> None:
    path = DATA / "mini-swe-agent" / f"{name}.traj.json"
    (traj,) = load(path)
    messages = raw_json(path)["messages"]
    assert traj.name == name
    assert len(traj.sections) == MINI_MESSAGES[name] == len(messages)
    assert [s.text for s in traj.sections] == [m["content"] for m in messages]  # verbatim
    steps = sum(m["role"] == "assistant" for m in messages)
    assert len(traj.turns) == 1 + steps
    assert [s.kind for s in traj.turns[0]] == ["system", "user"]
    assert all(len(turn) == 2 for turn in traj.turns[1:])


def test_mini_swe_agent_final_diff_closes_the_last_turn() -> None:
    path = DATA / "mini-swe-agent" / "django__django-15629.traj.json"
    (traj,) = load(path)
    call, diff = traj.turns[-1]
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in call.text
    assert diff.kind == "tool_result" and diff.group == call.id
    assert diff.meta["event"] == "submission"
    assert diff.text == raw_json(path)["info"]["submission"]
    assert traj.sections[3].meta["exit_code"] == "0"


def test_mini_swe_agent_stress_message() -> None:
    (traj,) = load(DATA / "mini-swe-agent" / "psf__requests-1142.traj.json")
    biggest = max(traj.sections, key=lambda s: len(s.text))
    assert len(biggest.text) == 868167
    assert biggest.kind == "tool_result"


def test_openhands_one_trajectory_per_line() -> None:
    path = DATA / "openhands" / "output.jsonl"
    trajs = load(path)
    assert [t.name for t in trajs] == PONYC
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for traj, events, record in zip(trajs, PONYC_EVENTS, records, strict=True):
        assert len(record["history"]) == events
        assert len(traj.sections) == events - 1
        assert [s.kind for s in traj.turns[0]] == ["system", "user", "other"]
        assert traj.turns[0][1].text == record["instruction"]
        assert traj.turns[0][2].meta["event"] == "recall"


def test_openhands_actions_and_observations() -> None:
    path = DATA / "openhands" / "output.jsonl"
    traj = load(path)[0]
    args = json.loads(path.read_text(encoding="utf-8").splitlines()[0])["history"][4]["args"]
    first_call, first_result = traj.turns[1]
    assert first_call.kind == "tool_call" and first_call.meta["event"] == "run"
    assert first_call.text == args["thought"] + "\n\n$ ls -l /workspace/ponylang__ponyc__0.1"
    assert first_result.group == first_call.id and first_result.meta["exit_code"] == "0"
    events = [s.meta["event"] for s in traj.sections]
    assert events.count("think") == 2  # the think action (assistant) and its observation
    think = next(s for s in traj.sections if s.meta["event"] == "think")
    assert think.kind == "assistant"
    finish = traj.sections[-1]
    assert finish.kind == "assistant" and finish.meta["task_completed"] == "partial"
    assert "[finish]" in finish.text
    stamps = [s.ts for s in traj.sections]
    assert all(ts > 1.7e9 for ts in stamps) and stamps == sorted(stamps)


def test_openhands_malformed_tool_call_error_is_its_own_turn() -> None:
    traj = load(DATA / "openhands" / "output.jsonl")[1]
    (error,) = [s for s in traj.sections if s.meta["event"] == "error"]
    turn = next(t for t in traj.turns if error in t)
    assert turn == [error]
    assert error.kind == "tool_result" and error.group == "" and error.meta["unpaired"] == "1"


def test_openhands_nunu0404_stress_observation() -> None:
    (traj,) = load(DATA / "openhands-nunu0404" / "output.jsonl")
    assert traj.name == "alibaba__fastjson2-2775"
    assert len(traj.sections) == 40  # 21 actions + 19 observations
    assert [s.kind for s in traj.turns[0]] == ["user"]  # no system event in this run
    biggest = max(traj.sections, key=lambda s: len(s.text))
    assert len(biggest.text) > 900_000
    assert biggest.kind == "tool_result" and biggest.meta["exit_code"] == "-1"


def test_swe_agent_history() -> None:
    path = DATA / "swe-agent" / "pydicom__pydicom-1458.traj"
    (traj,) = load(path)
    history = raw_json(path)["history"]
    assert traj.name == "pydicom__pydicom-1458"
    assert len(traj.sections) == 26 == len(history)
    assert [s.text for s in traj.sections] == [m["content"] for m in history]
    system, demo, task = traj.turns[0]
    assert system.kind == "system"
    assert (demo.kind, demo.priority, demo.meta["demo"]) == ("user", "low", "1")
    assert (task.kind, task.priority) == ("user", "critical")
    assert len(traj.turns) == 13
    assert traj.turns[1][0].meta["command"] == "create reproduce_bug.py"
    assert traj.turns[1][1].meta["path"] == "/pydicom__pydicom/reproduce_bug.py"


def test_first_section_is_the_pinned_system_prompt(corpus: list[Trajectory]) -> None:
    for traj in corpus:
        first = traj.sections[0]
        if traj.name == "alibaba__fastjson2-2775":
            assert first.kind == "user"
            continue
        assert (first.kind, first.priority, first.pinned) == ("system", "critical", True)
        assert sum(s.pinned for s in traj.sections) == 1


def test_turn_zero_holds_the_task(corpus: list[Trajectory]) -> None:
    for traj in corpus:
        tasks = [s for s in traj.turns[0] if s.kind == "user" and s.priority == "critical"]
        assert len(tasks) == 1, traj.name
        assert len(tasks[0].text) > 1000
        later = [s for turn in traj.turns[1:] for s in turn]
        assert all(s.kind in CALL_KINDS | {"tool_result"} for s in later), traj.name


def test_ids_unique_and_deterministic(corpus: list[Trajectory]) -> None:
    for traj in corpus:
        assert [s.id for s in traj.sections] == [f"s{i:05d}" for i in range(len(traj.sections))]
    again = load_many(all_files())
    assert [t.sections for t in again] == [t.sections for t in corpus]


def test_every_tool_result_is_grouped_with_a_preceding_call(corpus: list[Trajectory]) -> None:
    unpaired = 0
    for traj in corpus:
        calls: set[str] = set()
        for section in traj.sections:
            if section.kind in CALL_KINDS:
                assert section.group == section.id
                calls.add(section.id)
            elif section.kind == "tool_result":
                if section.meta.get("unpaired") == "1":
                    unpaired += 1
                    assert section.group == "" and section.meta["event"] == "error"
                else:
                    assert section.group in calls, (traj.name, section.id)
    assert unpaired == 2  # the two malformed tool calls in openhands/output.jsonl


def test_later_turns_start_with_an_llm_step(corpus: list[Trajectory]) -> None:
    for traj in corpus:
        for turn in traj.turns[1:]:
            assert turn[0].kind in CALL_KINDS or turn[0].meta.get("unpaired") == "1"
            assert all(s.kind == "tool_result" for s in turn[1:])


def test_sections_are_valid_on_the_wire(corpus: list[Trajectory]) -> None:
    for traj in corpus:
        for section in traj.sections:
            assert section.meta["source"] == traj.fmt
            assert all(len(k) <= 128 and len(v) <= 4096 for k, v in section.meta.items())
            assert Section.from_wire(section.to_wire(), max_text=1 << 21) == section


def test_token_counter_is_applied(corpus: list[Trajectory]) -> None:
    assert all(s.tokens == 0 for t in corpus for s in t.sections)
    counted = load(DATA / "swe-agent" / "pydicom__pydicom-1458.traj", count=len)[0]
    assert all(s.tokens == len(s.text) for s in counted.sections)
    assert sum(s.tokens for s in counted.sections) == 56550  # SOURCES.md: content chars


def test_format_is_detected_from_content(tmp_path: Path) -> None:
    mini = tmp_path / "renamed.jsonl"
    mini.write_bytes((DATA / "mini-swe-agent" / "django__django-15629.traj.json").read_bytes())
    swe = tmp_path / "renamed.json"
    swe.write_bytes((DATA / "swe-agent" / "pydicom__pydicom-1458.traj").read_bytes())
    oh = tmp_path / "one.traj"
    oh.write_text((DATA / "openhands" / "output.jsonl").read_text(encoding="utf-8").splitlines()[2])
    assert [(t.fmt, t.name) for t in load_many([mini, swe, oh])] == [
        ("mini-swe-agent", "django__django-15629"),
        ("swe-agent", "renamed"),
        ("openhands", "ponylang__ponyc-4588"),
    ]


def openhands_record(history: list[object]) -> str:
    return json.dumps({"instance_id": "synthetic-1", "instruction": "do it", "history": history})


def test_openhands_odd_events(tmp_path: Path) -> None:
    response = {"tool_call_metadata": {"model_response": {"id": "r1"}}}
    history: list[object] = [
        {"id": 1, "source": "user", "action": "message", "args": {"content": "do it"}},
        {"id": 2, "source": "agent", "action": "run", "args": {"command": "ls", "thought": ""}, **response},
        {
            "id": 3,
            "source": "agent",
            "action": "read",
            "args": {"path": "/a", "view_range": [1, 5]},
            **response,
        },
        {"id": 4, "source": "agent", "observation": "run", "cause": 2, "content": "", "extras": {}},
        {
            "id": 5,
            "source": "agent",
            "observation": "read",
            "cause": 3,
            "content": "x",
            "extras": {"path": "/a"},
        },
        {"id": 6, "source": "environment", "observation": "agent_state_changed", "content": "", "extras": {}},
        {"id": 7, "source": "environment", "message": "a note", "kind": "status"},
        {"id": 8, "source": "environment", "kind": "heartbeat"},
        "not an event",
    ]
    path = tmp_path / "output.jsonl"
    path.write_text(openhands_record(history) + "\n\n" + openhands_record(history[:1]) + "\n")
    first, second = load(path)
    assert [len(turn) for turn in first.turns] == [1, 5]  # parallel calls share one turn
    run, read, run_out, read_out, note = first.turns[1]
    assert (run.text, read.text) == ("$ ls", "[read] /a (lines 1-5)")
    assert (run_out.text, run_out.group) == ("", run.id)  # an empty tool output is kept
    assert read_out.group == read.id and read_out.meta["path"] == "/a"
    assert (note.kind, note.text) == ("other", "a note")
    assert second.name == "synthetic-1" and len(second.sections) == 1


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.traj.json"
    with pytest.raises(TrajectoryError, match=re.escape(str(missing))):
        load(missing)


def test_garbage_json(tmp_path: Path) -> None:
    bad = tmp_path / "bad.traj.json"
    bad.write_text('{"messages": [\n  {"role": "system",\n oops')
    with pytest.raises(TrajectoryError, match=rf"{re.escape(str(bad))}:3: invalid JSON"):
        load(bad)


def test_garbage_jsonl_line_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "output.jsonl"
    bad.write_text(openhands_record([]) + "\n{not json}\n")
    with pytest.raises(TrajectoryError, match=rf"{re.escape(str(bad))}:2: invalid JSON"):
        load(bad)


@pytest.mark.parametrize("content", ['{"foo": 1}', "[1, 2, 3]", '{"history": [{"x": 1}]}', ""])
def test_unknown_shape(tmp_path: Path, content: str) -> None:
    bad = tmp_path / "weird.json"
    bad.write_text(content)
    with pytest.raises(TrajectoryError, match=re.escape(str(bad))) as info:
        load(bad)
    assert isinstance(info.value, ValueError)


def test_unknown_shape_on_a_jsonl_line(tmp_path: Path) -> None:
    bad = tmp_path / "output.jsonl"
    bad.write_text(openhands_record([]) + "\n" + '{"foo": 1}\n')
    with pytest.raises(TrajectoryError, match=rf"{re.escape(str(bad))}:2: unknown trajectory format"):
        load(bad)


def test_malformed_messages(tmp_path: Path) -> None:
    bad = tmp_path / "x.traj.json"
    bad.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1", "messages": [1, 2]}))
    with pytest.raises(TrajectoryError, match=re.escape(str(bad))):
        load(bad)
