"""Where a scoring's time goes, on this machine (stop 46; a probe, not a bench: one run, idle machine).

For score_rows 64, 128 and 256: the scoring rate of the first 100 and 400 lines of
summarizer/digest.py (best of two), the share of the time in the numpy log-softmax
(summarizer.logprobs.token_logprobs), and a plain prefill of the same text for comparison.

.venv/bin/python bench/results/modelshare/stop46/score_rows.py
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import summarizer.logprobs as L
from summarizer.engine import EngineSettings, LlamaEngine
from summarizer.select import NEUTRAL_PREFIX
from watcher.runtime.paths import default_model_path

_orig = L.token_logprobs
_spent = [0.0]


def _timed(*a: Any, **k: Any) -> Any:
    t = time.perf_counter()
    r = _orig(*a, **k)
    _spent[0] += time.perf_counter() - t
    return r


L.token_logprobs = _timed  # score_locked looks it up in the module at each call
TEXT = Path("summarizer/digest.py").read_text(encoding="utf-8").split("\n")[:400]


async def main() -> None:
    for rows in (64, 128, 256):
        model = str(default_model_path())
        e = LlamaEngine(EngineSettings(model, weights="q4_0", flash_attn=True, score_rows=rows))
        for n in (100, 400):
            best, share = 0.0, 0.0
            for _ in range(2):
                _spent[0] = 0.0
                t = time.perf_counter()
                s = await e.score(NEUTRAL_PREFIX, [x + "\n" for x in TEXT[:n]], 600)
                wall = time.perf_counter() - t
                if s.tokens / wall > best:
                    best, share = s.tokens / wall, _spent[0] / wall
            print(f"rows {rows} lines {n} tokens {s.tokens} rate {best:.0f} tok/s log-softmax {share:.0%}")
        g = await e.generate("<|im_start|>user\n", "\n".join(TEXT)[:5000], "", max_tokens=1)
        print(f"  plain prefill {g.prompt_tokens} tokens {g.prompt_tokens / g.prefill_s:.0f} tok/s")


if __name__ == "__main__":
    asyncio.run(main())
