"""The harness starts `python -m watcher` for the tree ``$PYTHONPATH`` names, wherever it runs from."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from watcher.eval.harness import daemon_argv, watcher_argv

REPO = Path(__file__).resolve().parents[3]


def test_the_daemon_of_the_tree_on_pythonpath_runs_even_from_a_checkout(tmp_path: Path) -> None:
    """A side-by-side benchmark starts each tree's daemon with PYTHONPATH=TREE from the repository
    root: ``-m`` would put the working directory (this checkout) first and run its daemon instead."""
    tree = tmp_path / "tree" / "watcher"
    tree.mkdir(parents=True)
    (tree / "__init__.py").write_text("")
    (tree / "__main__.py").write_text("import watcher, sys\nprint(watcher.__file__, sys.argv[1:])\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "tree")}
    cmd = daemon_argv("ipc:///nowhere.sock", tmp_path / "state")
    assert cmd[: len(watcher_argv())] == watcher_argv()
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.startswith(str(tree / "__init__.py")), out.stdout
    assert "'run'" in out.stdout
    assert (REPO / "watcher" / "__main__.py").exists()  # the checkout it did not run
