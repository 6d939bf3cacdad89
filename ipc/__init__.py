"""compactd's wire protocol and the client library agents embed (no daemon code, no model)."""

from ipc.sections import Section, SectionError

__all__ = ["Section", "SectionError"]
