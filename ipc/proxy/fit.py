"""The last resort when the ready digests do not make a request fit its window: leave the oldest
messages out of the upstream request (elision), in whole tool groups, behind one note message.

The daemon plans ahead, but one proposal at a time: when the agent's turns come faster than its
digests (or a tool output is huge), a request can reach ``apply_at`` of the window with every
ready digest already on the wire. Rather than let the request grow past the window (the provider's
400, or the agent's own reactive compaction: minutes of waiting), the proxy cuts the oldest
messages after the conversation's head, down to ``elide_to`` of the window (hysteresis: the cut is
not moved again on the next turn), and puts one user message in their place that names them.

The run is deterministic (the same history gives the same cut) and sticky: messages elided once stay
elided (a digest that replaces only elided messages is elided too), so later requests repeat the
same bytes and the cache keeps everything up to the cut. Never elided: the system prompt, the first
message (the task), a message with a ``cache_control`` marker, the latest message, part of a tool
group. The agent still holds the originals (it sends them with every request), the daemon still
mirrors them (its digests archive them), and the recall tool answers their ids from the proxy's copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

ELISION_KEY = "compactd-elided"
NOTE_TOKENS = 64  # room for the note itself


def head_end(ids: Sequence[str], kind: Callable[[str], str]) -> int:
    """Index after the conversation's head: leading system messages and the first other message."""
    i = 0
    while i < len(ids) and kind(ids[i]) == "system":
        i += 1
    return min(i + 1, len(ids))


def extend(
    ids: Sequence[str],
    start: int,
    need: int,
    tokens: Callable[[str], int],
    group: Callable[[str], str],
    movable: Callable[[str], bool],
) -> int:
    """The end (exclusive) of the run from ``start`` that covers ``need`` tokens, ending only at a
    tool-group boundary and stopping before a message that must stay; ``start`` if none."""
    best, covered, i = start, 0, start
    while i < len(ids) and movable(ids[i]):
        covered += tokens(ids[i])
        i += 1
        if i == len(ids) or not group(ids[i]) or group(ids[i]) != group(ids[i - 1]):
            best = i  # a group boundary
            if covered >= need:
                break
    return best


def note(ids: Sequence[str], tokens: int, recall_tool: bool) -> str:
    """The text that stands for the elided run (deterministic: a function of the run)."""
    how = (
        "call compactd_recall with one of these ids to read it"
        if recall_tool
        else "compactd still holds them and archives them as it digests them"
    )
    first, last = ids[0], ids[-1]
    return (
        f"[compactd elided {len(ids)} earlier messages {first}..{last} (~{tokens} tokens) from this "
        f"request to fit the context window; {how}]"
    )
