"""The shared Context: O(change) deltas, atomic failure, proposals that are safe to apply late."""

from __future__ import annotations

import pytest

from ipc.context import Context, ContextError
from ipc.protocol import Op, Proposal
from ipc.sections import Section


def sec(i: int, tokens: int = 10, **kw: object) -> Section:
    return Section(f"s{i}", "tool_result", f"text {i}", tokens=tokens, **kw)  # type: ignore[arg-type]


def proposal(ids: tuple[str, ...], base: int, digest_id: str = "d1") -> Proposal:
    d = Section(digest_id, "digest", "digest", tokens=3)
    return Proposal("p1", base, ids, (d,), 20, 3, 0, ("a1",))


def test_append_replace_remove_track_tokens_and_version() -> None:
    ctx = Context()
    ctx.apply_ops([Op("append", (sec(1), sec(2), sec(3)))], 1)
    assert (ctx.version, ctx.tokens, ctx.ids()) == (1, 30, ["s1", "s2", "s3"])
    ctx.apply_ops([Op("replace", (sec(2, tokens=5),))], 2)
    ctx.apply_ops([Op("remove", ids=("s1",))], 3)
    assert (ctx.version, ctx.tokens, ctx.ids()) == (3, 15, ["s2", "s3"])


def test_failed_delta_changes_nothing() -> None:
    ctx = Context([sec(1)])
    with pytest.raises(ContextError):
        ctx.apply_ops([Op("append", (sec(2),)), Op("remove", ids=("nope",))], 1)
    assert (ctx.version, ctx.ids(), ctx.tokens) == (0, ["s1"], 10)
    with pytest.raises(ContextError):
        ctx.apply_ops([Op("append", (sec(1),))], 1)


def test_proposal_applies_late_after_appends() -> None:
    ctx = Context()
    ctx.apply_ops([Op("append", (sec(1), sec(2), sec(3)))], 1)
    p = proposal(("s1", "s2"), base=1)
    ctx.apply_ops([Op("append", (sec(4),))], 2)  # the agent went on meanwhile
    assert ctx.stale_reason(p) == ""
    ctx.apply_proposal(p, 3)
    assert ctx.ids() == ["d1", "s3", "s4"]
    assert ctx.tokens == 3 + 20


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (Op("replace", (sec(2, tokens=1),)), "changed"),
        (Op("remove", ids=("s2",)), "gone"),
    ],
)
def test_proposal_is_stale_when_its_sections_changed(change: Op, reason: str) -> None:
    ctx = Context()
    ctx.apply_ops([Op("append", (sec(1), sec(2), sec(3)))], 1)
    p = proposal(("s1", "s2"), base=1)
    ctx.apply_ops([change], 2)
    assert reason in ctx.stale_reason(p)
    with pytest.raises(ContextError):
        ctx.apply_proposal(p, 3)


def test_proposal_needs_contiguous_sections() -> None:
    ctx = Context([sec(1), sec(2), sec(3)], version=1)
    assert "contiguous" in ctx.stale_reason(proposal(("s1", "s3"), base=1))
