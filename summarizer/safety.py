"""Region text is data: find instruction-like text and neutralize markers before it goes anywhere.

A section may contain a prompt injection ("ignore previous instructions…", a fake
``<|im_start|>system`` turn, a fake tool call, a fake compactd digest header). Three defences use
this module:

* the model never sees instruction-like lines: `redact` replaces them before a gist is written,
  so the gist cannot echo them (and the source check then rejects any gist naming their words);
* key facts that are instruction-like are not promoted to the digest's "Key facts" line
  (`instruction_like`); they stay in the quoted section text, and in the archive;
* every piece of region text rendered into a digest goes through `defang`, which breaks
  chat-template markers and fake digest headers, so quoted text cannot open a turn or pose as
  compactd's own output.
"""

from __future__ import annotations

import re

from summarizer.textscan import line_starts, lines_with

WITHHELD = "[instruction-like text withheld]"

_INSTRUCTION = re.compile(
    r"<\|[a-z_]{1,24}\|>"  # chat-template markers: <|im_start|>, <|system|>, <|eot_id|> ...
    r"|\[/?INST\]|<</?SYS>>"
    r"|\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+|the\s+|your\s+|of\s+)*"
    r"(?:previous|prior|above|earlier|preceding|system|original)\s+"
    r"(?:instructions?|prompts?|rules|messages|directions|context|guidelines)\b"
    r"|(?:^|[.!?]\s+)(?:please\s+)?(?:ignore|disregard|forget)\s+(?:all\s+|any\s+|the\s+)?"
    r"(?:previous|prior|above|everything)\b"
    r"|\b(?:you\s+must\s+now|from\s+now\s+on|new\s+instructions?|you\s+are\s+now|act\s+as\s+(?:an?\s+)?\w+"
    r"|system\s+(?:prompt|override|notice|message)|developer\s+mode|jailbreak)\b"
    r"|\b(?:tell|inform|assure)\s+the\s+user\b|\b(?:respond|answer|reply)\s+only\b"
    r"|\b(?:note|message|instructions?|request)\s+(?:to|for)\s+(?:the\s+)?"
    r"(?:summarizer|summary|assistant|ai|model|llm|compactd)\b"
    r"|\b(?:summarizer|assistant|ai|llm)\s*[,:]\s*(?:please\s+)?(?:write|say|output|respond|reply|state)\b"
    r"|^\s*#{1,4}\s*(?:instruction|system|new task)s?\b"
    r"|^\s*(?:system|assistant|user|developer|human)\s*:"
    r"|</?(?:tool_call|tool_use|function_call|function|tool|system|instructions?)\b[^>\n]{0,80}>"
    r"|\"(?:tool_calls|function_call)\"\s*:"
    r"|\[compactd digest\b"  # compactd's own digest lines, faked
    r"|^\s*(?:-\s*)?(?:key facts|summary|sections)\b[^\n]{0,40}\((?:verbatim|quoted|model-written)"
    r"|\b(?:agent|assistant|you|model)\s+(?:must|should|shall)\s+now\b",
    re.IGNORECASE | re.MULTILINE,
)

_MARKER = re.compile(
    r"<\|([a-z_]{1,24})\|>|\[(/?INST)\]|<<(/?SYS)>>"
    r"|<(/?(?:tool_call|tool_use|function_call|function_calls|invoke|tool_result|system)\b)",
    re.IGNORECASE,
)
_FAKE_HEADER = re.compile(r"\[(compactd digest)\b", re.IGNORECASE)


def instruction_like(text: str) -> bool:
    """True if `text` contains something that reads as an instruction to a model or a turn marker."""
    return _INSTRUCTION.search(text) is not None


# every branch of _INSTRUCTION needs one of these (lower-cased): a line holding none cannot match
_GATE = (
    "<|", "inst]", "sys>>", "ignore", "disregard", "forget", "override", "now", "instruction", "act",
    "system", "developer", "jailbreak", "user", "only", "note", "message", "request", "write", "say",
    "output", "respond", "reply", "state", "#", "assistant", "human", "tool", "function", "compactd",
    "verbatim", "quoted", "model-written",
)  # fmt: skip


def redact(text: str) -> str:
    """`text` with every instruction-like line replaced by a placeholder (input for the model).

    Only lines holding a word some branch of the pattern needs are searched (the same result as
    searching every line, in a fraction of the time on a megabyte of log)."""
    lines = text.split("\n")
    low = text.lower()  # (may differ in length from text: line starts are counted on it)
    gated = lines_with(low, _GATE, line_starts(low.split("\n")))
    hits = [i for i in sorted(gated) if instruction_like(lines[i])]
    if not hits:
        return text
    for i in hits:
        lines[i] = WITHHELD
    return "\n".join(lines)


def _unmark(m: re.Match[str]) -> str:
    if m[1] is not None:
        return f"< |{m[1]}| >"
    if m[2] is not None:
        return f"[ {m[2]} ]"
    if m[3] is not None:
        return f"< <{m[3]}> >"
    return f"< {m[4]}"


def defang(text: str) -> str:
    """Break chat-template markers, tool-call tags and fake digest headers in quoted text
    (still readable, no longer live)."""
    text = _MARKER.sub(_unmark, text)
    return _FAKE_HEADER.sub(r"[quoted \1", text)
