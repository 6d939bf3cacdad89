"""The [model] keys reach the engine the daemon loads (watcher.runtime.engine.load_engine)."""

from __future__ import annotations

from pathlib import Path

from watcher.config.loading import load
from watcher.runtime.engine import load_engine


def test_the_model_table_reaches_the_engine(model_path: str, tmp_path: Path) -> None:
    config = tmp_path / "compactd.toml"
    config.write_text(
        f'[model]\npath = "{model_path}"\nn_ctx = 512\nn_batch = 256\nscore_rows = 32\nweights = "shipped"\n',
        encoding="utf-8",
    )
    engine = load_engine(load(config))
    assert engine is not None
    try:
        s = engine.settings
        assert (s.path, s.n_ctx, s.n_batch, s.score_rows, s.weights) == (model_path, 512, 256, 32, "")
        assert engine.n_ctx == 512
    finally:
        engine.close()
