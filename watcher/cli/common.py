"""What every command shares: the exit codes and the one way to report an error."""

from __future__ import annotations

import sys

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def fail(msg: str, code: int = EXIT_ERROR) -> int:
    print(f"compactd: error: {msg}", file=sys.stderr)
    return code
