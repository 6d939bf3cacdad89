import sys, os
from llama_cpp import Llama
def rss():
    for l in open('/proc/self/status'):
        if l.startswith('VmRSS'): return int(l.split()[1])/1024
t = sys.argv[1]
kw = {} if t == 'f16' else {'type_k': 8, 'type_v': 8}
path = "/root/.cache/compactd/SmolLM2-135M-Instruct.Q4_1.f4d97aee40995111.q4_0.gguf"
r0 = rss()
llm = Llama(model_path=path, n_ctx=2048, n_batch=512, n_ubatch=512, flash_attn=True, use_mmap=False, verbose=False, **kw)
r1 = rss()
import time
toks = llm.tokenize(("the quick brown fox jumps over the lazy dog " * 200).encode())[:1800]
t0=time.time(); llm.eval(toks); dt=time.time()-t0
r2 = rss()
print(t, 'load adds', round(r1-r0,1), 'after 1800-token eval', round(r2-r0,1), 'prefill tok/s', round(len(toks)/dt))
