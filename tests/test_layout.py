"""Imports run one way: ipc <- watcher -> summarizer. ipc and summarizer are leaves.

The rooms inside watcher/ and the absence of cycles are checked by import-linter (pyproject.toml,
[tool.importlinter]; `lint-imports` in ./dev.sh test)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# ipc subpackages with optional dependencies of their own (not needed to attach an agent)
IPC_OPTIONAL = ("proxy", "integrations")
FORBIDDEN = {"ipc": {"watcher", "summarizer"}, "summarizer": {"watcher", "ipc"}}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_leaf_packages_do_not_import_upward(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    for f in files:
        bad = imported_packages(f) & FORBIDDEN[package]
        assert not bad, f"{f.relative_to(ROOT)} imports {sorted(bad)}"


OPTIONAL = IPC_OPTIONAL


def core_files() -> list[Path]:
    files = [f for f in (ROOT / "ipc").rglob("*.py") if f.relative_to(ROOT / "ipc").parts[0] not in OPTIONAL]
    assert ROOT / "ipc" / "client.py" in files
    return files


def test_client_needs_only_pyzmq_and_msgpack() -> None:
    third_party = set()
    for f in core_files():
        third_party |= imported_packages(f)
    assert third_party - {"ipc", "__future__"} <= {
        "asyncio",
        "collections",
        "contextlib",
        "dataclasses",
        "itertools",
        "types",
        "typing",
        "zmq",
        "msgpack",
        "threading",
        "time",
        "json",
        "enum",
        "re",
        "functools",
        "queue",
        "concurrent",
        "os",
        "math",
        "abc",
        "sys",
        "zlib",  # ipc.sections: long texts held deflated
    }


def test_core_never_imports_the_optional_parts() -> None:
    for f in core_files():
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad = [n for n in names if n.split(".")[:2] in (["ipc", o] for o in OPTIONAL)]
            assert not bad, f"{f.relative_to(ROOT)} imports {bad}"


PROXY_EXTRA = {"aiohttp", "multidict", "msgspec", "prometheus_client"}  # compactd[proxy]


def test_proxy_imports_only_ipc_its_extra_and_the_stdlib() -> None:
    import sys

    for f in (ROOT / "ipc" / "proxy").rglob("*.py"):
        outside = imported_packages(f) - {"ipc", "__future__"} - PROXY_EXTRA
        assert outside <= set(sys.stdlib_module_names), f"{f.relative_to(ROOT)}: {sorted(outside)}"


def test_import_ipc_does_not_load_the_proxy() -> None:
    import subprocess
    import sys

    code = "import sys, ipc; print(sorted(m for m in sys.modules if m.startswith(('ipc.proxy', 'aiohttp'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
