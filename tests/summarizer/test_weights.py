"""summarizer.weights with the real model: where the cache lives, a damaged cached file, reloads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from summarizer.engine import EngineSettings, LlamaEngine
from summarizer.weights import converted_path, default_cache_dir, normalize


def test_default_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("CACHE_DIRECTORY", raising=False)
    assert default_cache_dir() == tmp_path / ".cache" / "compactd"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # ignored, as the XDG spec says
    assert default_cache_dir() == tmp_path / ".cache" / "compactd"
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg/cache")
    assert default_cache_dir() == Path("/xdg/cache/compactd")
    # systemd's CacheDirectory=compactd: the directory itself (it may list several; the first wins)
    monkeypatch.setenv("CACHE_DIRECTORY", "/var/cache/compactd:/var/cache/other")
    assert default_cache_dir() == Path("/var/cache/compactd")


def test_normalize() -> None:
    assert normalize("") == normalize("shipped") == ""
    assert normalize("q8_0") == "q8_0"


def test_config_does_not_load_the_engine_to_know_the_formats() -> None:
    """watcher.config.settings imports summarizer.weights for FORMATS: that must stay cheap (no numpy,
    no llama)."""
    code = "import sys, watcher.config.settings; print(sorted({'numpy', 'llama_cpp'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_damaged_cached_file_falls_back_then_reload_reencodes(model_path: str, tmp_path: Path) -> None:
    eng = LlamaEngine(EngineSettings(model_path, n_threads=1, weights="q8_0", cache_dir=str(tmp_path)))
    try:
        cached = converted_path(model_path, "q8_0", tmp_path)
        assert (eng.loaded_path, eng.weights_in_use, eng.weights_error) == (str(cached), "q8_0", "")
        # damage it the way a crash of the disk might: a new file under the same name (the running
        # model keeps its mapping of the old one)
        junk = tmp_path / "junk"
        junk.write_bytes(b"GGUF" + os.urandom(1024))
        junk.replace(cached)
        eng.reload_sync()
        assert (eng.loaded_path, eng.weights_in_use) == (model_path, "")
        assert "re-encoded weights unusable (removed)" in eng.weights_error
        assert str(cached) in eng.weights_error
        assert not cached.exists()
        assert eng.count_tokens("hello world") > 0  # the shipped file serves
        eng.reload_sync()  # the next load re-encodes
        assert (eng.loaded_path, eng.weights_in_use, eng.weights_error) == (str(cached), "q8_0", "")
    finally:
        eng.close()
    assert sorted(tmp_path.iterdir()) == [cached]


def test_a_new_conversion_replaces_the_stale_one(model_path: str, tmp_path: Path) -> None:
    """The model file changed (or moved): its old conversion is dropped, other files are kept."""
    import shutil

    from summarizer.weights import convert

    cache = tmp_path / "cache"
    src = tmp_path / "m.gguf"
    shutil.copyfile(model_path, src)
    other = tmp_path / "other" / "m2.gguf"  # another model name: not touched
    other.parent.mkdir()
    shutil.copyfile(model_path, other)
    first = convert(str(src), "q4_0", cache, n_threads=1)
    kept = convert(str(other), "q4_0", cache, n_threads=1)
    os.utime(src, ns=(1_000_000_000, 1_000_000_000))  # "updated"
    second = convert(str(src), "q4_0", cache, n_threads=1)
    assert second != first
    assert sorted(p.name for p in cache.iterdir()) == sorted(Path(x).name for x in (second, kept))
