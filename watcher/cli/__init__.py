"""The `compactd` command line: parser, then one module per command group (operate, evaluate)."""

from watcher.cli.main import main

__all__ = ["main"]
