"""watcher.config.schema is the one statement of the configuration: the README table and the example
are generated from it and must be up to date; the reload classes are derived from it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from watcher.config import docs
from watcher.config.schema import AGENTS, KEYS, TABLE_KEYS
from watcher.config.settings import ENGINE_KEYS, RESTART_REQUIRED, Config, load
from watcher.config.spec import Reload

ROOT = Path(__file__).resolve().parents[3]


def test_generated_docs_are_up_to_date() -> None:
    stale = docs.stale(ROOT)
    assert stale == [], f"stale: {stale}; run `python -m watcher.config.docs --write`"
    assert docs.main(["--check", "--root", str(ROOT)]) == 0


def test_every_key_is_documented_once_and_every_number_has_bounds() -> None:
    assert len({s.dotted for s in KEYS}) == len(KEYS) >= 44
    for spec in [*KEYS, *TABLE_KEYS[AGENTS].values()]:
        assert spec.meta.doc.strip() and "|" not in spec.meta.doc, spec.dotted
        assert spec.type in (bool, int, float, str), spec.dotted
        assert spec.meta.rule is not None or spec.type in (bool, str), f"{spec.dotted}: a number needs bounds"
    assert not [s.dotted for s in KEYS if s.meta.unset and s.meta.example is None]


def test_reload_classes_are_derived_from_the_schema() -> None:
    restart = "daemon.socket daemon.state_dir daemon.max_frame_bytes daemon.curve_secret_key_file"
    restart += " daemon.curve_allowed_keys_dir model.n_ctx model.n_threads model.weights model.cache_dir"
    assert set((restart + " metrics.listen store.synchronous").split()) <= RESTART_REQUIRED
    engine = "model.path model.enabled model.n_batch model.max_tokens model.timeout_s model.score_rows"
    assert set(engine.split()) <= ENGINE_KEYS
    assert "model.required" in {s.dotted for s in KEYS if s.meta.reload is Reload.START}
    assert not RESTART_REQUIRED & ENGINE_KEYS


def test_example_sets_every_key_to_its_schema_default() -> None:
    text = docs.example_toml()
    for spec in KEYS:
        line = f"{spec.name} = {docs.toml_value(spec.meta.example if spec.meta.unset else spec.default)}"
        assert ("# " + line if spec.meta.unset else line) in text.splitlines(), spec.dotted
    assert load(ROOT / "docs" / "compactd.example.toml") == Config(
        source=str(ROOT / "docs/compactd.example.toml")
    )


def test_check_finds_a_stale_file_and_write_fixes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    example = tmp_path / "docs" / "compactd.example.toml"
    example.write_text(docs.example_toml().replace("qos = 1", "qos = 2"), encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        readme.read_text(encoding="utf-8").replace("| `mqtt.qos` | `1` |", "| `mqtt.qos` | `2` |")
    )
    assert docs.stale(tmp_path) == [example, readme]
    assert docs.main(["--check", "--root", str(tmp_path)]) == 1
    assert "stale; run `python -m watcher.config.docs --write`" in capsys.readouterr().err
    assert docs.main(["--write", "--root", str(tmp_path)]) == 0
    assert docs.stale(tmp_path) == []
    assert example.read_text(encoding="utf-8") == (ROOT / "docs" / "compactd.example.toml").read_text()
    assert readme.read_text(encoding="utf-8") == (ROOT / "README.md").read_text(encoding="utf-8")


def test_missing_markers_are_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "compactd.example.toml").write_text(docs.example_toml(), encoding="utf-8")
    (tmp_path / "README.md").write_text("# compactd\n\nno tables here\n", encoding="utf-8")
    assert docs.main(["--check", "--root", str(tmp_path)]) == 2
    assert "markers of the generated block 'config-keys' are missing" in capsys.readouterr().err
