"""The `compactd` command line: parser, then one module per command group (operate, evaluate)."""

import sys

# The daemon (``compactd run``) does not load rich: importing structlog imports it where it is
# installed (52 modules with pygments, ~4.4 MB resident) only to render tracebacks for a terminal,
# and the daemon logs JSON lines or plain text. Other commands, and a process that has already
# imported structlog or rich, are left as they are.
if sys.argv[1:2] == ["run"] and "structlog" not in sys.modules:
    sys.modules.setdefault("rich", None)  # type: ignore[arg-type]  # `import rich` raises ImportError

from watcher.cli.main import main

__all__ = ["main"]
