"""One process: the engine loaded (q4_0 weights, n_ctx 2048), three scoring passes of 80 log lines
and one 64-token generation; prints PSS before, after the load and after the jobs, and the best
scoring rate (JSON). Then the large mappings (size, resident).

Argument: a JSON object of extra ``Llama()`` keywords (e.g. ``{"type_k": 8}``), plus ``SCORE_ROWS``
(the engine's score_rows), ``PATH`` (another GGUF), ``DUMP`` (write the pieces' scores there).
Run from the repository: ``.venv/bin/python bench/results/memory/stop31/llmem.py '{"SCORE_ROWS": 64}'``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from summarizer import engine as engine_mod  # noqa: E402
from summarizer import loader  # noqa: E402
from summarizer.loader import EngineSettings  # noqa: E402

LOG = ROOT.parent / "shared" / "cilogbench" / "dev" / "pytest-pandas-001" / "raw.log"


def mem() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        if key in ("Rss", "Pss", "Pss_Anon", "Pss_File"):
            out[key] = int(value.split()[0]) // 1024
    return out


def big_mappings() -> list[tuple[int, int, str]]:
    maps, cur = [], None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        parts = line.split()
        if "-" in parts[0] and ":" not in parts[0] and len(parts) >= 5:
            a, b = (int(x, 16) for x in parts[0].split("-"))
            cur = ((b - a) >> 20, parts[5] if len(parts) > 5 else "[anon]")
        elif line.startswith("Rss:") and cur is not None:
            rss = int(parts[1]) >> 10
            if cur[0] >= 8 or rss >= 8:
                maps.append((cur[0], rss, cur[1]))
    return maps


def main() -> None:
    extra: dict[str, Any] = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    rows, other, dump = extra.pop("SCORE_ROWS", None), extra.pop("PATH", None), extra.pop("DUMP", None)
    opened = loader._open

    def _open(settings: EngineSettings, path: str, n_threads: int) -> Any:
        from llama_cpp import Llama

        if not extra and other is None:
            return opened(settings, path, n_threads)
        kw: dict[str, Any] = {
            "model_path": other or path,
            "n_ctx": settings.n_ctx,
            "n_threads": 1,
            "n_threads_batch": n_threads,
            "n_batch": settings.n_batch,
            "n_ubatch": settings.n_ubatch or settings.n_batch,
            "flash_attn": settings.flash_attn,
            "use_mmap": False,
            "verbose": False,
        }
        return Llama(**(kw | extra))

    loader._open = _open
    from watcher.runtime.paths import default_model_path

    settings = EngineSettings(path=str(default_model_path()), weights="q4_0")
    if rows:
        settings = replace(settings, score_rows=int(rows))
    before = mem()
    eng = engine_mod.LlamaEngine(settings)
    loaded = mem()
    lines = LOG.read_text(errors="replace").splitlines()[:80]

    pieces: list[list[float]] = []

    async def jobs() -> tuple[float, int, float]:
        best, tokens = 1e9, 0
        for _ in range(3):
            t = time.perf_counter()
            scored = await eng.score("Rank the lines.\n", [ln + "\n" for ln in lines])
            best, tokens = min(best, time.perf_counter() - t), scored.tokens
        pieces[:] = [[p.logprob, p.tokens] for p in scored.pieces]
        t = time.perf_counter()
        await eng.generate("Summarize:\n", "\n".join(lines[:20]), "\nSummary:", max_tokens=64)
        return best, tokens, time.perf_counter() - t

    score_s, tokens, gen_s = asyncio.run(jobs())
    if dump:
        Path(dump).write_text(json.dumps(pieces))
    after = mem()
    print(json.dumps({
        "extra": sys.argv[1:], "before": before, "loaded": loaded, "after": after,
        "score_s": round(score_s, 3), "tok_per_s": round(tokens / score_s), "gen_s": round(gen_s, 3),
    }))  # fmt: skip
    for size, rss, name in big_mappings():
        print("map", size, "MB", "rss", rss, name)


if __name__ == "__main__":
    main()
