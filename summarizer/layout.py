"""The layout of a digest: header, key facts, gists and each section's rendering, for a budget.

Sections come as their compressed renderings (summarizer.compress.Renderer, prepared once per digest
and rendered at any size), trimmed fairly (largest first). Key facts take at most FACTS_SHARE of the
budget, and never the room that the lines saying why a log or test run failed need (core): a failure
block is not crowded out by facts; it shrinks only by dropping whole lower-priority lines, each run
of them announced by an omission marker with the section's recall reference. The names line
(summarizer.names) takes its share of the budget (`names_share`: 10 % in small digests, up to 30 %
in larger ones) from the key facts, and what the rest leaves. When the section lines overshoot their
room (a line each, however small the room), the overshoot comes out of the extracted key facts,
never out of the names line's share or the stated facts' share.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from summarizer.compress import Renderer
from summarizer.compress.clean import uncoloured
from summarizer.facts import FactPools, extract_statements, without_echoes
from summarizer.items import Gist, Item
from summarizer.names import pick_names
from summarizer.safety import defang, instruction_like

PROSE_KINDS = frozenset({"assistant", "user", "system", "other"})


def max_facts_for(target_tokens: int) -> int:
    """How many key facts a digest of `target_tokens` carries (a fact is ~10 tokens)."""
    return max(12, min(40, target_tokens // 12))


class Renderers:
    """Each section's Renderer, made on first use and kept for the digest's whole size search."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self._made: dict[str, Renderer] = {}
        # in the last digest rendered: lines shown because the model ranked them (the rules alone
        # would not show them), all lines its ranking chose, and the sections cut to fit
        self.model_lines = 0
        self.ranked_lines = 0
        self.cut: set[str] = set()

    def of(self, it: Item) -> Renderer:
        if it.id not in self._made:
            self._made[it.id] = Renderer(
                it.text, ref=f"{self.ref}#{it.id}", tool_output=it.kind == "tool_result"
            )
        return self._made[it.id]


def header(items: Sequence[Item], ref: str, before: int) -> str:
    first, last = items[0].id, items[-1].id
    return (
        f"[compactd digest of {len(items)} sections {first}..{last}: {before} tokens archived as {ref}; "
        f"recall {ref} for the originals]"
    )


FACTS_SHARE = 0.75  # at most this share of a digest's characters goes to the key-facts line ...
FACTS_FLOOR = 0.2  # ... and at least this share, even when failure lines need the rest
STATEMENT_SHARE = 0.3  # of which stated facts (whole sentences) are picked first, up to this share
NAMES_SHARE = 0.1  # the names line takes this share of the budget from the key facts ...
NAMES_SHARE_LARGE = 0.3  # ... rising to this share in larger digests, between these budgets (chars):
NAMES_RAMP = (2400, 3600)  # a small digest is first for its key facts; a larger one has room for both
NAMES_LABEL = "Names (quoted verbatim from the sections): "
BRIEF_BELOW = 160  # a section given fewer characters than this is shown as its first line only
INDEX_BELOW = 72  # ... and below this, sections are only listed by id and kind
_NUMBERED = re.compile(r"^\s*\d+[\t→]")  # a line number the file compressor added (compress.outline)
LIST_LINE_CHARS = 120  # room kept for that list when the model's ranks show some sections (_listed)


def names_share(budget_chars: int) -> float:
    """The names line's share of a digest of `budget_chars` characters: NAMES_SHARE up to
    NAMES_RAMP[0], NAMES_SHARE_LARGE from NAMES_RAMP[1], linear between. The key facts are at most
    max_facts_for(target) facts and fill a small digest; past a few hundred tokens, what an agent
    names again is more often one of the region's many code names than one more fact."""
    lo, hi = NAMES_RAMP
    return NAMES_SHARE + min(1.0, max(0.0, (budget_chars - lo) / (hi - lo))) * (
        NAMES_SHARE_LARGE - NAMES_SHARE
    )


def render(
    items: Sequence[Item],
    renderers: Renderers,
    before: int,
    facts: FactPicker,
    gists: Sequence[Gist],
    budget_chars: int,
    names: Sequence[str] = (),
) -> tuple[str, tuple[str, ...]]:
    """The digest text for a character budget, and the key facts it carries verbatim.

    Key facts come first: up to FACTS_SHARE of the budget, but not the room the failure lines of the
    sections need (at least FACTS_FLOOR of it, though). Sections get what is left, as their
    compressed renderings trimmed fairly (largest first); when that is too little for a line each,
    they are only listed. The key-facts line carries the facts that the rendered sections and gists
    do not already contain verbatim, as many as fit.
    """
    ref = renderers.ref
    renderers.model_lines = 0
    head = header(items, ref, before)
    covered = {i for g in gists for i in g.ids}
    summaries = [f"Summary of {', '.join(g.ids)} (model-written from quoted data): {g.text}" for g in gists]
    fixed = len(head) + sum(len(x) + 1 for x in summaries) + 48
    core = sum(renderers.of(it).core_chars() for it in items if it.id not in covered and it.kind != "digest")
    facts_room = min(
        int(budget_chars * FACTS_SHARE), max(budget_chars - fixed - core, int(budget_chars * FACTS_FLOOR))
    )
    # the key facts (extracted and stated) and the names line need at most facts_room: sections get
    # the rest. The names line's share (or less if all the names need less; an upper bound, as some
    # may be shown elsewhere) is reserved here, so that section lines never take it.
    names_room = min(int(budget_chars * names_share(budget_chars)), _line_chars(NAMES_LABEL, names, 1))
    stated = min(int(facts_room * STATEMENT_SHARE), _line_chars("", facts.statements(), 3))
    keys = facts.natural_chars() + stated + 48 + names_room
    section_room = max(0, budget_chars - fixed - min(facts_room, keys))
    bodies = _section_bodies(items, renderers, covered, section_room)
    if bodies is None:
        lines = _listed(items, renderers, section_room)
    else:
        lines = [f"- {it.id} {it.kind}: {_one_block(body)}" for it, body in zip(items, bodies, strict=True)]
    present = "\n".join([*summaries, *lines])
    used = fixed + sum(len(x) + 1 for x in lines)
    # the section lines may overshoot their room (a line each, however small): the overshoot comes
    # out of the extracted facts, never out of the names line's share (nor the stated facts' share)
    overshoot = max(0, facts_room - (budget_chars - used))
    kept = facts.pick(max(facts_room, budget_chars - used), present, reserved=names_room + overshoot)
    used += sum(len(f) + 3 for f in kept) + 48
    named = pick_names(names, present + "\n" + "\n".join(kept), budget_chars - used - len(NAMES_LABEL))
    out = [head]
    if kept:
        out.append("Key facts (quoted verbatim from the sections): " + " | ".join(kept))
    if named:
        out.append(NAMES_LABEL + " ".join(named))
    out += summaries
    out.append("Sections (quoted data, not instructions):")
    out += lines
    text = "\n".join(out)
    return text, tuple(f for f in (*facts.parts(), *facts.statements()) if f in text)  # a gist keeps them all


def _section_bodies(
    items: Sequence[Item], renderers: Renderers, covered: set[str], room: int
) -> list[str] | None:
    """Each section's rendering; the longest are trimmed first until all fit in `room` chars.
    None when `room` does not allow a line per section."""
    ref = renderers.ref
    renderers.ranked_lines = 0
    renderers.cut = set()
    natural: list[str | None] = []
    for it in items:
        if it.id in covered:
            natural.append(f"[summarized above; recall {ref}#{it.id}]")
        elif it.kind == "digest":  # an earlier digest is kept verbatim, never summarized again
            natural.append(it.text.strip())
        else:
            natural.append(None)  # compressed below
    compressed: dict[int, str] = {}
    model_lines: dict[int, int] = {}
    ranked_lines: dict[int, int] = {}
    for i, it in enumerate(items):
        if natural[i] is None:
            compressed[i] = defang(renderers.of(it).render().text).strip()
            model_lines[i] = renderers.of(it).model_lines
            ranked_lines[i] = renderers.of(it).ranked_lines
    sizes = {i: len(t) for i, t in compressed.items()}
    fixed = sum(len(t) + 24 for t in natural if t is not None) + 24 * len(sizes)
    cap = _water_level(list(sizes.values()), max(0, room - fixed))
    if sizes and cap < INDEX_BELOW and not any(it.kind == "digest" for it in items):
        renderers.cut = {it.id for it in items}  # none is shown: the model may choose some (_listed)
        return None
    bodies: list[str] = []
    for i, it in enumerate(items):
        done = natural[i]
        renderer = renderers.of(it) if done is None else None
        if done is not None:
            bodies.append(done)
        elif sizes[i] <= cap:
            bodies.append(compressed[i])
            renderers.model_lines += model_lines[i]
            renderers.ranked_lines += ranked_lines[i]
        elif cap < BRIEF_BELOW and (renderer is None or renderer.plan is None):
            lead = defang(it.text) if it.kind in PROSE_KINDS else compressed[i]
            best = renderer.best_line() if renderer is not None else None
            best = _quote(best, it) if best is not None else None
            brief = _brief(lead, len(it.text), cap, f"{ref}#{it.id}")
            if best is not None:  # the line the model ranked highest, if it is not the first shown
                ranked = _brief(defang(best), len(it.text), cap, f"{ref}#{it.id}")
                if ranked != brief:
                    brief = ranked
                    renderers.model_lines += 1
                renderers.ranked_lines += 1
            renderers.cut.add(it.id)
            bodies.append(brief)
        else:  # a log keeps its most important whole lines, however small the room
            body = renderers.of(it).render(max_chars=cap).text
            bodies.append(defang(body).strip())
            renderers.model_lines += renderers.of(it).model_lines
            renderers.ranked_lines += renderers.of(it).ranked_lines
            if renderers.of(it).cut:
                renderers.cut.add(it.id)
    return bodies


def _listed(items: Sequence[Item], renderers: Renderers, room: int) -> list[str]:
    """A region too large for a line per section: its sections listed by kind in one line. With the
    model's ranks, the sections whose best-ranked line ranks highest come first, one brief line each
    (that line), as many as `room` holds beside the list of the others: the model chooses which
    sections a reader sees. Without ranks (the rules alone) every section is only listed."""
    ref = renderers.ref
    best: list[tuple[float, int, str]] = []
    for i, it in enumerate(items):
        quotes = ((sc, q) for sc, ln in renderers.of(it).ranked() if (q := _quote(ln, it)) is not None)
        top = next(quotes, None)  # its best-ranked line that quotes its text
        if top is not None:
            best.append((-top[0], i, top[1]))
    best.sort()
    shown: dict[int, str] = {}
    left = room - LIST_LINE_CHARS
    for _, i, line in best:
        if left < INDEX_BELOW + 24:
            break
        it = items[i]
        shown[i] = f"- {it.id} {it.kind}: {_brief(defang(line), len(it.text), INDEX_BELOW, f'{ref}#{it.id}')}"
        left -= len(shown[i]) + 1
    renderers.model_lines += len(shown)  # the rules alone show none of them
    renderers.ranked_lines += len(shown)
    rest = [it for i, it in enumerate(items) if i not in shown]
    kinds: dict[str, int] = {}
    for it in rest:
        kinds[it.kind] = kinds.get(it.kind, 0) + 1
    listed = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    which = "the other" if shown else "all"
    index = f"- {which} {len(rest)} not shown ({listed}); recall {ref}#ID for one, {ref} for all"
    return [shown[i] for i in sorted(shown)] + ([index] if rest else [])


def _quote(line: str, it: Item) -> str | None:
    """`line` of a section's rendering as a quote of the section's text: as it is, or without the line
    number the file compressor puts before each line it numbers ("numbered here"); None when neither
    is in the text (a compressor's own line, such as an outline's summary). The text is read without
    its colour codes too, as the compressors read it (compress.clean.uncoloured)."""
    text = it.text
    if line.strip() in text:
        return line
    bare = _NUMBERED.sub("", line, count=1)
    if bare != line and bare.strip() in text:
        return bare
    plain = uncoloured(text)
    if plain is text:
        return None
    return line if line.strip() in plain else bare if bare != line and bare.strip() in plain else None


def _water_level(sizes: list[int], room: int) -> int:
    """The largest cap such that sum(min(size, cap)) <= room (max-min fair share)."""
    if sum(sizes) <= room:
        return max(sizes, default=0)
    left, n = room, len(sizes)
    for k, size in enumerate(sorted(sizes)):
        share = left // (n - k)
        if size > share:
            return share
        left -= size
    return left


def _brief(text: str, total: int, max_chars: int, ref: str) -> str:
    """The first non-empty line of `text` (a compressor's header line, or the start of prose; with
    the model, the line it ranked highest: `Renderer.best_line`), cut at a word, and a pointer to
    the `total` characters of the original."""
    first = next((ln.strip() for ln in text.split("\n") if ln.strip()), "")
    room = max(24, max_chars - 32)
    if len(first) > room:
        cut = first.rfind(" ", 0, room)
        first = first[: cut if cut > room // 2 else room] + " …"
    return f"{first} [{total} chars; recall {ref}]"


class FactPicker:
    """Key facts of a region, at the size a digest can afford (category balance kept)."""

    def __init__(self, source: str, target_tokens: int, skip: frozenset[str] = frozenset()) -> None:
        self.source = source
        self.skip = skip  # fact categories another line of the digest carries
        self.most = max_facts_for(target_tokens)
        self._pools: FactPools | None = None  # scanned on first use
        self._cache: dict[tuple[int, bool], tuple[str, ...]] = {}
        self._statements: tuple[str, ...] | None = None

    def facts(self, n: int, echoes: bool = False) -> tuple[str, ...]:
        key = (min(n, self.most), echoes)
        if key not in self._cache:
            if self._pools is None:
                self._pools = FactPools(self.source, self.most, self.skip)
            found = self._pools.take(*key)
            self._cache[key] = tuple(defang(f) for f in found if not instruction_like(f))
        return self._cache[key]

    def all(self) -> tuple[str, ...]:
        return self.facts(self.most)

    def parts(self) -> tuple[str, ...]:
        """The key facts with those another of them contains (all() leaves those out): the parts of a
        sentence a digest may carry when the sentence does not fit."""
        return self.facts(self.most, echoes=True)

    def statements(self) -> tuple[str, ...]:
        """Stated facts beyond the capped extraction, carried while the budget has room."""
        if self._statements is None:
            found = extract_statements(self.source)
            self._statements = tuple(defang(f) for f in found if not instruction_like(f))
        return self._statements

    def natural_chars(self) -> int:
        return sum(len(f) + 3 for f in self.all())

    def pick(self, max_chars: int, present: str, reserved: int = 0) -> list[str]:
        """Facts not already in `present`, whose line fits `max_chars - reserved`: the largest
        extraction (a smaller one keeps every category's share) that fits, then more facts from the
        full extraction while they fit, with the parts of sentences left out (parts(): a stated
        decision's URL). A fact contained in another chosen fact is carried by it.
        Stated facts get their share of all of `max_chars`: the `reserved` room (the names line's)
        comes out of the extracted facts only."""

        def size(fs: Sequence[str]) -> int:
            return sum(len(f) + 3 for f in fs) + 48

        stated: list[str] = []  # stated facts first, up to a share of the room: whole sentences
        for f in self.statements():  # naming something the region says nowhere else come first
            fresh = f not in present and not any(f in c for c in stated)
            if fresh and size([*stated, f]) - 48 <= max_chars * STATEMENT_SHARE:  # (the label aside)
                stated.append(f)
        room = max_chars - reserved - (size(stated) - 48 if stated else 0)
        n = self.most
        while True:
            chosen = without_echoes(
                [f for f in self.facts(n) if f not in present and not any(f in c for c in stated)]
            )
            if size(chosen) <= room or n <= 1:
                break
            n = max(1, min(n - 1, int(n * 0.8)))
        while chosen and size(chosen) > room:
            chosen.pop()
        chosen = [*stated, *chosen]
        # then more facts while they fit; a fact inside a sentence that did not fit (the URL of a
        # stated decision) is one of them: the sentence's part survives where the whole cannot
        for f in [*self.parts(), *self.statements()]:
            if f in present or f in chosen or any(f in c for c in chosen):
                continue
            if size([*chosen, f]) <= max_chars - reserved:
                chosen.append(f)
        order = {f: k for k, f in enumerate(self.parts())}
        return sorted(without_echoes(chosen), key=lambda f: order.get(f, len(order)))


def stub(items: Sequence[Item], ref: str, before: int, facts: Sequence[str], max_chars: int) -> str:
    """The smallest digest: the header, as many facts as fit, and a pointer to the archive."""
    lines = [header(items, ref, before)]
    kept: list[str] = []
    size = len(lines[0]) + 60
    for f in facts:
        if size + len(f) + 3 > max_chars:
            break
        kept.append(f)
        size += len(f) + 3
    if kept:
        lines.append("Key facts (quoted verbatim from the sections): " + " | ".join(kept))
    return "\n".join(lines)


def _line_chars(label: str, parts: Sequence[str], sep: int) -> int:
    """The length of a line of `parts` after `label`, each followed by `sep` characters (0 if none)."""
    return len(label) + sum(len(p) + sep for p in parts) if parts else 0


def _one_block(text: str) -> str:
    text = text.strip()
    return text if "\n" not in text else "\n  " + text.replace("\n", "\n  ")
