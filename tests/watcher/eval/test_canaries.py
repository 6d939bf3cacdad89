"""Canary planting and scoring, on a real trajectory with the model's tokenizer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from ipc.sections import Section
from summarizer.tokenizer import load_counter
from watcher.eval.canaries import CANARY_KINDS, CanaryError, load_canaries, plant, score
from watcher.eval.trajectories import Trajectory, load

REPO = Path(__file__).resolve().parents[3]
CANARIES = REPO / "bench" / "canaries.txt"


@pytest.fixture(scope="module")
def count(model_path: str) -> Callable[[str], int]:
    return load_counter(model_path)


@pytest.fixture(scope="module")
def pydicom(trajectories: Path, count: Callable[[str], int]) -> Trajectory:
    return load(trajectories / "swe-agent" / "pydicom__pydicom-1458.traj", count=count)[0]


def test_shipped_canaries_are_unique_facts_found_nowhere_in_the_corpus(trajectories: Path) -> None:
    sentences = load_canaries(CANARIES)
    assert len(sentences) >= 20
    corpus = "".join(p.read_text(encoding="utf-8") for p in trajectories.rglob("*") if p.is_file())
    for s in sentences:
        assert s not in corpus
        assert 20 < len(s) <= 200


def test_bad_canary_files_fail_with_file_and_line(tmp_path: Path) -> None:
    dup = tmp_path / "dup.txt"
    dup.write_text("# comment\nThe port is 5.\n\nThe port is 5.\n", encoding="utf-8")
    with pytest.raises(CanaryError, match=r"dup\.txt:4: duplicate of line 2"):
        load_canaries(dup)
    empty = tmp_path / "empty.txt"
    empty.write_text("# only comments\n\n", encoding="utf-8")
    with pytest.raises(CanaryError, match="no canary sentences"):
        load_canaries(empty)
    long = tmp_path / "long.txt"
    long.write_text("x" * 201 + "\n", encoding="utf-8")
    with pytest.raises(CanaryError, match=r"long\.txt:1: canary longer than 200"):
        load_canaries(long)
    with pytest.raises(CanaryError, match="cannot read"):
        load_canaries(tmp_path / "missing.txt")


def test_plant_is_seeded_verbatim_and_recounted(pydicom: Trajectory, count: Callable[[str], int]) -> None:
    sentences = load_canaries(CANARIES)
    planted, canaries = plant(pydicom, sentences, 7, count)
    again, same = plant(pydicom, sentences, 7, count)
    _, other = plant(pydicom, sentences, 8, count)
    assert canaries == same and planted.turns == again.turns
    assert [c.section for c in canaries] != [c.section for c in other]
    assert [c.kind for c in canaries[:6]] == [*CANARY_KINDS, *CANARY_KINDS]
    by_id = {s.id: s for s in planted.sections}
    original = {s.id: s for s in pydicom.sections}
    kinds = {"user": {"user"}, "tool": {"tool_result"}, "assistant": {"assistant", "tool_call"}}
    for c in canaries:
        sec = by_id[c.section]
        assert sec.kind in kinds[c.kind]
        assert c.text in sec.text.split("\n"), "a canary sits on a line of its own"
        assert sec.tokens == count(sec.text) > original[c.section].tokens
    untouched = set(original) - {c.section for c in canaries}
    assert all(by_id[i] == original[i] for i in untouched)
    assert [[s.id for s in t] for t in planted.turns] == [[s.id for s in t] for t in pydicom.turns]


def test_score_counts_only_compacted_sections(pydicom: Trajectory, count: Callable[[str], int]) -> None:
    planted, canaries = plant(pydicom, load_canaries(CANARIES)[:6], 1, count)
    by_id = {s.id: s for s in planted.sections}
    tool = next(c for c in canaries if c.kind == "tool")
    asst = next(c for c in canaries if c.kind == "assistant")
    user = next(c for c in canaries if c.kind == "user")
    # the tool output was masked (same id, other text); the assistant turn went into a digest that
    # kept its canary; the user turn is untouched
    context = [
        replace(s, text="[omitted]") if s.id == tool.section else s
        for s in planted.sections
        if s.id != asst.section
    ]
    context.append(Section("d1", "digest", f"Key facts (verbatim): {asst.text}"))
    compacted_by = {tool.section: ("a1",), asst.section: ("a2",)}
    recalled = {"a1": [by_id[tool.section]], "a2": []}  # a2's originals did not come back
    tally = score([tool, asst, user], by_id, context, compacted_by, recalled)
    m = tally.metrics()
    assert m["canary_in_context"] == {"user": None, "tool": 0.0, "assistant": 1.0}
    assert m["canary_recall"] == 0.5
    assert m["canaries"]["user"] == {
        "planted": 1,
        "compacted": 0,
        "in_context": 0,
        "recalled": 0,
        "verbatim_at_end": 1,
    }
    assert tally.lost == [tool.text]
