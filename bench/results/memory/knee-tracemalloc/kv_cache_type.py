"""RSS and prefill rate of the engine's model with an f16 or a q8_0 KV cache (stop 25).

Usage: python kv_cache_type.py f16|q8 [GGUF]   (default: the engine's re-encoded q4_0 weights in the cache)
"""

import sys
import time
from pathlib import Path

from llama_cpp import Llama

GGML_TYPE_Q8_0 = 8
DEFAULT = "~/.cache/compactd/SmolLM2-135M-Instruct.Q4_1.f4d97aee40995111.q4_0.gguf"


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    kind = sys.argv[1]
    path = str(Path(sys.argv[2] if len(sys.argv) > 2 else DEFAULT).expanduser())
    kv = {} if kind == "f16" else {"type_k": GGML_TYPE_Q8_0, "type_v": GGML_TYPE_Q8_0}
    r0 = rss_mb()
    llm = Llama(
        model_path=path,
        n_ctx=2048,
        n_batch=512,
        n_ubatch=512,
        flash_attn=True,
        use_mmap=False,
        verbose=False,
        **kv,
    )
    r1 = rss_mb()
    tokens = llm.tokenize(("the quick brown fox jumps over the lazy dog " * 200).encode())[:1800]
    t0 = time.perf_counter()
    llm.eval(tokens)
    seconds = time.perf_counter() - t0
    r2 = rss_mb()
    print(kind, "load adds", round(r1 - r0, 1), "after a 1800-token eval", round(r2 - r0, 1), end=" ")
    print("prefill tok/s", round(len(tokens) / seconds))


if __name__ == "__main__":
    main()
