"""The regret metric: synthetic cases with a known answer, then a real trajectory."""

from __future__ import annotations

from pathlib import Path

from ipc.sections import Section
from summarizer.digest import approx_tokens
from watcher.eval.regret import regret
from watcher.eval.trajectories import load


def _turns() -> list[list[Section]]:
    return [
        [Section("task", "user", "Fix parse_args in cli.py", priority="critical")],
        [
            Section("a1", "assistant", "read cli.py", group="1"),
            Section("r1", "tool_result", "def load_config(): ...", group="1"),
        ],
        [
            Section("a2", "assistant", "run the tests", group="2"),
            Section("r2", "tool_result", "FooError: boom", group="2"),
        ],
        [Section("a3", "assistant", "now look at load_config and FooError", group="3")],
        [Section("a4", "assistant", "done", group="4")],
    ]


def test_nothing_compacted_is_no_regret() -> None:
    r = regret(_turns(), {})
    assert (r.compacted, r.regretted, r.regret) == (0, 0, 0.0)


def test_a_folded_section_referenced_later_is_regretted() -> None:
    r = regret(_turns(), {"r1": 2})  # gone from LLM call 2 on; turn 3 (written by call 2) names load_config
    assert (r.compacted, r.regretted, r.regretted_raw) == (1, 1, 1)
    assert r.regretted_ids == ("r1",)
    assert r.metrics() == {"regret": 1.0, "regret_raw": 1.0, "compacted_sections": 1, "regretted_sections": 1}


def test_a_reference_before_the_fold_is_no_regret() -> None:
    assert regret(_turns(), {"r1": 3}).regretted == 0  # call 2 still saw it; nothing names it after


def test_no_regret_while_another_section_still_holds_the_identifier() -> None:
    turns = _turns()
    turns[2].append(Section("r2b", "tool_result", "load_config is defined in cli.py", group="2"))
    r = regret(turns, {"r1": 2})
    assert (r.regretted, r.regretted_raw) == (0, 1)
    r = regret(turns, {"r1": 2, "r2b": 2})  # both holders folded: lost
    assert r.regretted == 2


def test_ids_outside_the_trajectory_are_ignored() -> None:
    assert regret(_turns(), {"compactd-d1": 1}).compacted == 0


def test_sections_whose_identifiers_never_come_back_are_not_regretted() -> None:
    r = regret(_turns(), {"a1": 1, "a2": 2, "a4": 4})  # cli.py, "run the tests", "done": never named again
    assert (r.compacted, r.regretted, r.regretted_raw) == (3, 0, 0)


def test_real_trajectory_folding_old_history(trajectories: Path) -> None:
    traj = load(trajectories / "mini-swe-agent" / "sympy__sympy-13091.traj.json", count=approx_tokens)[0]
    old = {s.id: 40 for turn in traj.turns[1:30] for s in turn}
    r = regret(traj.turns, old)
    assert r.compacted == len(old)
    assert 0 < r.regretted <= r.regretted_raw <= r.compacted
    assert 0 < r.regret < 1
    late = regret(traj.turns, {s.id: len(traj.turns) for turn in traj.turns[1:30] for s in turn})
    assert late.regretted == late.regretted_raw == 0  # folded after the last call: never missed
