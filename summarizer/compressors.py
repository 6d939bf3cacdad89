"""Deterministic compressors for tool output (the implementation lives in summarizer.compress)."""

from summarizer.compress import SMALL_INPUT, Compressed, compress, head_tail, omission

__all__ = ["SMALL_INPUT", "Compressed", "compress", "head_tail", "omission"]
