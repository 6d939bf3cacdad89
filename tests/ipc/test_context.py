"""The shared Context: O(change) deltas, atomic failure, proposals that are safe to apply late."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_remove_then_append_moves_to_the_end_and_index_follows() -> None:
    ctx = Context([sec(1), sec(2), sec(3)], version=1)
    ctx.apply_ops([Op("remove", ids=("s1",)), Op("append", (sec(1, tokens=4),))], 2)
    assert ctx.ids() == ["s2", "s3", "s1"]
    assert (ctx.index("s1"), ctx.tokens, ctx.rev("s1"), ctx.rev("s2")) == (2, 24, 2, 1)
    with pytest.raises(ValueError, match="not in the context"):
        ctx.index("nope")


def test_replace_keeps_position() -> None:
    ctx = Context([sec(1), sec(2), sec(3)], version=1)
    ctx.apply_ops([Op("replace", (sec(2, tokens=1),))], 2)
    assert ctx.ids() == ["s1", "s2", "s3"] and ctx.tokens == 21


def test_reset_is_atomic() -> None:
    ctx = Context([sec(1)], version=3)
    with pytest.raises(ContextError):
        ctx.reset([sec(5), sec(5)], 9)
    assert (ctx.version, ctx.ids(), ctx.tokens) == (3, ["s1"], 10)


def test_proposal_in_the_middle_with_two_digests() -> None:
    ctx = Context([sec(i) for i in range(1, 6)], version=1)
    d1, d2 = Section("d1", "digest", "a", tokens=2), Section("d2", "digest", "b", tokens=3)
    p = Proposal("p1", 1, ("s2", "s3", "s4"), (d1, d2), 30, 5, 40, ("a1",))
    ctx.apply_proposal(p, 2)
    assert ctx.ids() == ["s1", "d1", "d2", "s5"] and ctx.tokens == 25 and ctx.rev("d2") == 2
    assert "gone" in ctx.stale_reason(p)


def test_proposal_rejects_repeated_ids_and_reused_digest_ids() -> None:
    ctx = Context([sec(1), sec(2), sec(3)], version=1)
    assert "repeat" in ctx.stale_reason(proposal(("s1", "s1"), base=1))
    assert "in use" in ctx.stale_reason(proposal(("s1", "s2"), base=1, digest_id="s3"))
    assert ctx.stale_reason(proposal(("s1", "s2"), base=1, digest_id="s1")) == ""


# --- property: the dict-ordered Context behaves like a plain list of sections -----------------------

ID = st.sampled_from([f"s{i}" for i in range(8)])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(ID, min_size=1, max_size=3)),
        st.tuples(st.just("replace"), st.lists(ID, min_size=1, max_size=2)),
        st.tuples(st.just("remove"), st.lists(ID, min_size=1, max_size=2)),
        st.tuples(st.just("propose"), st.lists(ID, min_size=1, max_size=3)),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(OPS, st.integers(1, 50))
def test_context_matches_a_list_model(ops: list[tuple[str, list[str]]], tokens: int) -> None:
    ctx = Context()
    model: list[Section] = []
    digests = 0
    for step, (kind, ids) in enumerate(ops, start=1):
        version = ctx.version + 1
        if kind == "propose":
            digests += 1
            d = Section(f"d{digests}", "digest", "d", tokens=1)
            p = Proposal(f"p{digests}", ctx.version, tuple(ids), (d,), 0, 1, 0, ())
            pos = [i for i, s in enumerate(model) if s.id == ids[0]]
            ok = (
                len(set(ids)) == len(ids)
                and bool(pos)
                and [s.id for s in model[pos[0] : pos[0] + len(ids)]] == ids
            )
            assert (ctx.stale_reason(p) == "") == ok
            if ok:
                ctx.apply_proposal(p, version)
                model[pos[0] : pos[0] + len(ids)] = [d]
            continue
        secs = tuple(Section(i, "user", "t", tokens=tokens + step) for i in dict.fromkeys(ids))
        op = Op("remove", ids=tuple(dict.fromkeys(ids))) if kind == "remove" else Op(kind, secs)
        present = {s.id for s in model}
        if kind == "append":
            ok = not any(s.id in present for s in secs)
        else:
            ok = all(s.id in present for s in secs) if kind == "replace" else set(op.ids) <= present
        if not ok:
            before = (ctx.ids(), ctx.tokens, ctx.version)
            with pytest.raises(ContextError):
                ctx.apply_ops([op], version)
            assert (ctx.ids(), ctx.tokens, ctx.version) == before
            continue
        ctx.apply_ops([op], version)
        if kind == "append":
            model.extend(secs)
        elif kind == "replace":
            new = {s.id: s for s in secs}
            model = [new.get(s.id, s) for s in model]
        else:
            model = [s for s in model if s.id not in op.ids]
        assert ctx.version == version
    assert ctx.ids() == [s.id for s in model]
    assert list(ctx) == model
    assert ctx.tokens == sum(s.tokens for s in model)
    assert len(ctx) == len(model)
