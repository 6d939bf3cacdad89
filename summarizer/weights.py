"""Re-encode the model's weights once into a format the CPU multiplies faster, cached on disk.

The shipped SmolLM2 file is Q4_1, for which llama.cpp has no repacked or tinyBLAS kernels: prefill
reaches only a fraction of what the cores can multiply. Q8_0 is near-lossless from Q4_1 (its
rounding step is ~1/16 of Q4_1's) and has fast AVX-512 kernels; F32 is exact. The conversion
(llama.cpp's own quantizer, ~1 s) runs once per source file and is cached by its path, size and
mtime. Which format pays off depends on the build: `compactd bench summarizer --weights` measures.

This module imports nothing heavy at import time (the configuration reads :data:`FORMATS`).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import tempfile
from pathlib import Path

from summarizer.gguf import ModelError, check_model_file, silence_llama_logs

FORMATS = ("q8_0", "q4_0", "f16", "bf16", "f32")
SHIPPED = ("", "shipped")  # the model file as it is, not re-encoded


def normalize(fmt: str) -> str:
    """``fmt`` as EngineSettings.weights takes it: "" for the file as shipped."""
    return "" if fmt in SHIPPED else fmt


def _ftype(fmt: str) -> int:
    import llama_cpp

    return int(
        {
            "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
            "q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0,
            "f16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16,
            "bf16": llama_cpp.LLAMA_FTYPE_MOSTLY_BF16,
            "f32": llama_cpp.LLAMA_FTYPE_ALL_F32,
        }[fmt]
    )


def default_cache_dir() -> Path:
    """``$CACHE_DIRECTORY`` (systemd's CacheDirectory=compactd, used as is), else
    ``$XDG_CACHE_HOME/compactd`` (if absolute), else ``~/.cache/compactd``."""
    systemd = os.environ.get("CACHE_DIRECTORY", "").split(":")[0]  # systemd may list several
    if systemd:
        return Path(systemd)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and Path(xdg).is_absolute():  # the XDG spec says to ignore a relative value
        return Path(xdg) / "compactd"
    return Path.home() / ".cache" / "compactd"


def converted_path(path: str, fmt: str, cache_dir: str | Path | None = None) -> Path:
    src = Path(path).resolve()
    st = src.stat()
    key = hashlib.sha256(f"{src}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return Path(cache_dir or default_cache_dir()) / f"{src.stem}.{key}.{fmt}.gguf"


def convert(path: str, fmt: str, cache_dir: str | Path | None = None, n_threads: int = 0) -> str:
    """The path of `path` re-encoded as `fmt` (converted now unless cached). Raises ModelError."""
    if fmt not in FORMATS:
        raise ModelError(f"unknown weight format {fmt!r} (one of {', '.join(FORMATS)})")
    check_model_file(path)
    try:
        out = converted_path(path, fmt, cache_dir)
    except RuntimeError as exc:  # Path.home(): no $HOME and no passwd entry
        raise ModelError(f"no cache directory for converted weights: {exc}") from exc
    if out.is_file():
        return str(out)
    import llama_cpp

    silence_llama_logs()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=out.name, suffix=".tmp", dir=out.parent)
        os.close(fd)
    except OSError as exc:
        raise ModelError(f"cannot write converted model to {out.parent}: {exc.strerror}") from exc
    try:
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = _ftype(fmt)
        params.allow_requantize = True
        params.nthread = n_threads
        rc = llama_cpp.llama_model_quantize(path.encode(), tmp.encode(), ctypes.byref(params))
        if rc != 0:
            raise ModelError(f"model file could not be converted to {fmt}: {path} (llama.cpp error {rc})")
        os.replace(tmp, out)  # atomic: a reader sees the whole file or none (two daemons may race)
    finally:
        Path(tmp).unlink(missing_ok=True)
    _drop_stale(out, fmt)
    return str(out)


def _drop_stale(out: Path, fmt: str) -> None:
    """Remove this source's earlier conversions to ``fmt`` (same file name, another path, size or
    mtime: the model was updated or moved), so the cache holds one file per model name and format.
    A daemon still running on one keeps its mapping: unlinking does not disturb it."""
    stem = out.name[: -len(f".{fmt}.gguf") - 17]
    pattern = re.compile(rf"{re.escape(stem)}\.[0-9a-f]{{16}}\.{re.escape(fmt)}\.gguf")
    for old in out.parent.iterdir():
        if old != out and pattern.fullmatch(old.name):
            old.unlink(missing_ok=True)
