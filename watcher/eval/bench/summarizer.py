"""`compactd bench summarizer`: digests of real trajectory regions with planted facts.

Regions are runs of consecutive sections cut from the recorded trajectories (never turn 0: the
system prompt and the task are anchors the planner never summarizes), 1.5k-4k model tokens each.
Into every region five facts are planted at seeded places, the way agents state them: an error
line inside a tool output ("KeyError: ... after N bytes"), and two stated decisions in the agent's
prose ("We decided to pin the X client to version V and keep its config in PATH." and "The fix is
to set `IDENT` to N, as described in URL."). The facts checked verbatim are the error line, V,
PATH, URL and IDENT. Every region is
digested twice with the digest target the planner would ask for (region / 6):

* deterministic: key facts + compressors, no model;
* model: the same plus checked model gists of the prose (summarizer.digest.Summarizer).

Reported (JSON): compression_ratio (region tokens / digest tokens, summed over regions),
fact_retention (planted facts found verbatim in the digests), the same for the deterministic path
alone (under "deterministic"), gist_hallucination_rate (gists rejected because they name something
the source does not contain / gists written), prefix KV reuse (prefix_tokens_full: the fixed prefix
tokens all jobs needed; prefix_tokens_reused: those whose KV state was reused), prefill_tps and
decode_tps of the gist jobs, stable_bytes (the first region digested again in the same engine and
in a second engine: same bytes), a prompt-lookup decoding A/B on the same gist prompts, and
prefill_compute_fraction = prefill_tps x 2 x parameters / the float32 matmul FLOP/s numpy reaches
with the same number of threads, measured in the same run in a subprocess without
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (the BLAS kernel that ran is reported; measured right before
each round's model digests). prefill_tps counts the gist jobs (tokens evaluated after the
reused prefix / prefill time); prefill_tps_probe is the best of three ~500-token gist-shaped
prefills run back to back, and prefill_compute_fraction_probe its fraction.

The numpy measurement and the model digests alternate ``rounds`` times (default 3), and the
fraction is computed per round from that round's prefill rate and numpy figure: the headline is
the median, with its range and the rounds under ``prefill_compute_fraction_spread``. The quality
figures come from the first round (greedy decoding: every round writes the same bytes). Goals:
prefix_reuse_fraction >= 0.95, compression_ratio >= 4, fact_retention >= 0.95,
prefill_compute_fraction >= 0.5, and at least one gist written (else the model was not exercised).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from ipc.sections import Section
from summarizer import gist
from summarizer.digest import GIST_MAX_TOKENS, Digest, Item, Summarizer, prose_chunks
from summarizer.engine import EngineSettings, LlamaEngine
from summarizer.gguf import ModelError
from summarizer.weights import normalize as normalize_weights
from watcher.eval.bench.goals import BenchError, Goal, exercised, judge, spread
from watcher.eval.scorecard import EngineWork
from watcher.eval.trajectories import Trajectory, TrajectoryError, load_many
from watcher.planning.planner import digest_target

DEFAULT_TRAJECTORIES: Final = Path(__file__).resolve().parents[4] / "shared" / "trajectories"
REGION_MIN, REGION_MAX = 1500, 4000  # model tokens
_OPENBLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
BUDGET: Final = 128_000
LOOKUP_AB_PROMPTS: Final = 6  # the agent budget digest_target is computed for (region // 6 wins)

_MATMUL = r"""
import json, os, sys, time
import numpy as np
n = int(sys.argv[1])
rng = np.random.default_rng(0)
a = rng.standard_normal((n, n), dtype=np.float32)
b = rng.standard_normal((n, n), dtype=np.float32)
a @ b
best = float("inf")
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t)
try:
    import threadpoolctl
    info = [{k: d.get(k) for k in ("internal_api", "architecture", "version", "num_threads")}
            for d in threadpoolctl.threadpool_info()]
except ImportError:
    info = []
print(json.dumps({"gflops": 2 * n**3 / best / 1e9, "blas": info}))
"""


@dataclass(frozen=True)
class SummarizerBenchSettings:
    model: str
    trajectories: tuple[Path, ...] = ()
    regions: int = 10
    seed: int = 5
    n_threads: int = 0
    n_batch: int = 512
    n_ubatch: int = 0
    flash_attn: bool = True
    weights: str = ""
    n_threads_decode: int = 1
    prompt_lookup: int = 0
    lookup_ab: int = 8  # draft tokens tried in the prompt-lookup A/B (0 = skip the A/B)
    rounds: int = 3  # numpy, then the model digests, this many times: the fraction's median and range


@dataclass(frozen=True)
class Region:
    name: str
    items: tuple[Item, ...]
    planted: tuple[str, ...]


# ------------------------------------------------------------------------------------------- regions

_WORDS = (
    "amber", "basalt", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
    "kestrel", "lumen", "marlin", "nectar", "onyx", "pylon", "quartz", "raven", "sierra", "tundra",
)  # fmt: skip
_ERRORS = ("ConnectionResetError", "PermissionError", "TimeoutError", "FileNotFoundError", "KeyError")


def _plant(items: list[Item], rng: random.Random, count: Any) -> tuple[list[Item], tuple[str, ...]]:
    """Put five facts into the region; returns the new items and the planted fact strings."""
    w = rng.sample(_WORDS, 6)
    n = [rng.randint(1000, 99999) for _ in range(4)]
    version = f"{rng.randint(10, 99)}.{rng.randint(0, 30)}.{rng.randint(1, 40)}"
    error = f"{rng.choice(_ERRORS)}: {w[0]} mirror closed the stream after {n[0]} bytes"
    path = f"/srv/{w[1]}/{w[2]}_{n[1]}.toml"
    url = f"https://ci.{w[3]}.example.org/runs/{n[2]}"
    ident = f"{w[4]}_{w[5]}_limit"
    planted = (error, version, path, url, ident)
    tools = [i for i, it in enumerate(items) if it.kind == "tool_result" and len(it.text) > 200]
    prose = [i for i, it in enumerate(items) if it.kind in ("assistant", "tool_call", "user")]
    out = list(items)

    def put(i: int, text: str, middle: bool) -> None:
        it = out[i]
        lines = it.text.split("\n")
        at = int(len(lines) * rng.uniform(0.3, 0.8)) if middle else len(lines)
        new = "\n".join([*lines[:at], text, *lines[at:]])
        out[i] = replace(it, text=new, tokens=count(new))

    t = rng.choice(tools) if tools else len(out) - 1
    put(t, error, middle=True)
    p1 = rng.choice(prose) if prose else 0
    p2 = rng.choice(prose) if prose else len(out) - 1
    put(p1, f"We decided to pin the {w[1]} client to version {version} and keep its config in {path}.", False)
    put(p2, f"The fix is to set `{ident}` to {n[3]}, as described in {url}.", False)
    return out, planted


def cut_regions(trajs: Sequence[Trajectory], n: int, seed: int, count: Any) -> list[Region]:
    """`n` regions of about REGION_MIN..REGION_MAX tokens, spread over the trajectories, seeded.

    Windows are found with a cheap estimate (3 characters per token); only the chosen regions are
    counted with the model's tokenizer.
    """
    rng = random.Random(seed)
    candidates: list[tuple[str, list[Section]]] = []
    for t in trajs:
        sections = [s for turn in t.turns[1:] for s in turn if s.kind != "system"]
        start = 0
        while start < len(sections):
            window: list[Section] = []
            total = 0
            i = start
            while i < len(sections) and total < REGION_MIN:
                size = len(sections[i].text) // 3
                if size > REGION_MAX:
                    break
                window.append(sections[i])
                total += size
                i += 1
            if REGION_MIN <= total <= REGION_MAX and len(window) >= 3:
                candidates.append((t.name, window))
            start = max(i, start + 1)
    if not candidates:
        raise BenchError("no region of 1.5k-4k tokens found in the trajectories")
    picked = rng.sample(candidates, min(n, len(candidates)))
    regions = []
    for name, window in picked:
        items = [Item(s.id, s.kind, s.text, count(s.text)) for s in window]
        planted_items, facts = _plant(items, rng, count)
        regions.append(Region(name, tuple(planted_items), facts))
    return regions


# ---------------------------------------------------------------------------------------- measuring


def numpy_matmul(threads: int, n: int = 2048, reps: int = 5) -> dict[str, Any]:
    """float32 matmul FLOP/s in a subprocess with `threads` BLAS threads and no core-type override."""
    env = {k: v for k, v in os.environ.items() if k not in _OPENBLAS_ENV}
    env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    proc = subprocess.run(
        [sys.executable, "-c", _MATMUL, str(n), str(reps)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise BenchError(f"numpy matmul measurement failed: {proc.stderr.strip()[-500:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    result["unset_env"] = {
        k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ
    }
    return result


def _retained(digests: Sequence[Digest], regions: Sequence[Region]) -> float:
    planted = sum(len(r.planted) for r in regions)
    found = sum(sum(1 for f in r.planted if f in d.text) for d, r in zip(digests, regions, strict=True))
    return found / planted if planted else 1.0


def _path_figures(digests: Sequence[Digest], regions: Sequence[Region], seconds: float) -> dict[str, Any]:
    before = sum(d.tokens_before for d in digests)
    after = sum(d.tokens for d in digests)
    return {
        "regions": len(digests),
        "tokens_before": before,
        "tokens_after": after,
        "compression_ratio": round(before / after, 3) if after else 0.0,
        "fact_retention": round(_retained(digests, regions), 4),
        "never_worse": all(d.tokens < d.tokens_before for d in digests),
        "seconds": round(seconds, 3),
        "ms_per_region": round(1000 * seconds / max(1, len(digests)), 2),
    }


async def _lookup_ab(engine: LlamaEngine, regions: Sequence[Region], n_draft: int) -> dict[str, Any]:
    """Decode the same gist prompts without and with prompt-lookup drafts."""
    prompts = []
    for r in regions:
        prompts += [data for _, data in prose_chunks(r.items, 10_000)[-1:]]
    prompts = prompts[:LOOKUP_AB_PROMPTS]
    figures: dict[str, Any] = {}
    texts: dict[int, list[str]] = {}
    for k in (0, n_draft):
        tokens = 0
        seconds = 0.0
        drafted = accepted = 0
        texts[k] = []
        for data in prompts:
            g = await engine.generate(
                gist.PREFIX, gist.quote(data), gist.SUFFIX, max_tokens=GIST_MAX_TOKENS, prompt_lookup=k
            )
            tokens += g.completion_tokens
            seconds += g.decode_s
            drafted += g.drafted
            accepted += g.accepted
            texts[k].append(g.text)
        figures[f"draft_{k}"] = {
            "decode_tps": round(tokens / seconds, 2) if seconds else 0.0,
            "completion_tokens": tokens,
            "draft_tokens": drafted,
            "draft_accepted": accepted,
        }
    figures["prompts"] = len(prompts)
    figures["same_text"] = texts[0] == texts[n_draft]
    base, pld = figures["draft_0"]["decode_tps"], figures[f"draft_{n_draft}"]["decode_tps"]
    figures["decode_speedup"] = round(pld / base, 3) if base else 0.0
    return figures


async def _prefill_probe(engine: LlamaEngine, regions: Sequence[Region], reps: int = 3) -> float:
    """Best prefill tok/s of ~500-token prompts after the reused prefix (gist-shaped jobs)."""
    text = "\n".join(i.text for r in regions for i in r.items)
    best = 0.0
    for k in range(reps):
        data = engine.detokenize(engine.tokenize(text[k * 4000 :], special=False)[:500])
        g = await engine.generate(gist.PREFIX, gist.quote(data), gist.SUFFIX, max_tokens=1)
        best = max(best, (g.prompt_tokens - g.reused_tokens) / g.prefill_s if g.prefill_s else 0.0)
    return best


async def run_summarizer_bench(settings: SummarizerBenchSettings) -> dict[str, Any]:
    if not 1 <= settings.rounds <= 10:
        raise BenchError("--rounds must be in 1..10")
    engine_settings = EngineSettings(
        settings.model,
        n_threads=settings.n_threads,
        n_threads_decode=settings.n_threads_decode,
        n_batch=settings.n_batch,
        n_ubatch=settings.n_ubatch,
        flash_attn=settings.flash_attn,
        weights=normalize_weights(settings.weights),
        prompt_lookup=settings.prompt_lookup,
        timeout_s=120.0,
    )
    try:
        t0 = time.perf_counter()
        engine = await asyncio.to_thread(LlamaEngine, engine_settings)
        load_s = time.perf_counter() - t0
    except ModelError as exc:
        raise BenchError(str(exc)) from exc
    try:
        paths = settings.trajectories or tuple(
            sorted(p for p in DEFAULT_TRAJECTORIES.rglob("*") if p.is_file())
        )
        paths = tuple(p for p in paths if p.suffix in (".json", ".jsonl", ".traj"))
        try:
            trajs = load_many(paths)
        except TrajectoryError as exc:
            raise BenchError(str(exc)) from exc
        if not trajs:
            raise BenchError(f"no trajectories found (looked in {DEFAULT_TRAJECTORIES})")
        regions = cut_regions(trajs, settings.regions, settings.seed, engine.count_tokens)

        det = Summarizer(None, count=engine.count_tokens)
        t = time.perf_counter()
        det_digests = [await det.digest(r.items, f"a{i}", _target(r)) for i, r in enumerate(regions)]
        det_s = time.perf_counter() - t

        model = Summarizer(engine)
        await model.warm()  # the daemon primes the fixed prefix once after loading
        rounds: list[tuple[float, dict[str, Any]]] = []  # (prefill tok/s, numpy) per round
        for r in range(settings.rounds):
            matmul = numpy_matmul(engine.n_threads)  # right before: the same machine state
            before = EngineWork.from_stats(engine.stats())
            t = time.perf_counter()
            summ = model if r == 0 else Summarizer(engine)  # counters of the first round only
            got = [await summ.digest(x.items, f"a{i}", _target(x)) for i, x in enumerate(regions)]
            if r == 0:
                digests, model_s, stats = got, time.perf_counter() - t, engine.stats()
            work = EngineWork.from_stats(engine.stats()) - before
            rounds.append((work.prefilled / work.prefill_s if work.prefill_s else 0.0, matmul))

        again = await model.digest(regions[0].items, "a0", _target(regions[0]))
        other = await asyncio.to_thread(LlamaEngine, engine_settings)
        try:
            fresh = await Summarizer(other).digest(regions[0].items, "a0", _target(regions[0]))
        finally:
            other.close()
        lookup = await _lookup_ab(engine, regions, settings.lookup_ab) if settings.lookup_ab else None
        params = engine.n_params
        probe = await _prefill_probe(engine, regions)
    finally:
        engine.close()

    gens = [g for d in digests for g in d.generations]
    written = len(gens)
    rejected_source = model.rejected_by.get(gist.SOURCE, 0)
    prefill_tps = float(stats["prefill_tps"])
    fractions = [tps * 2 * params / (m["gflops"] * 1e9) for tps, m in rounds if m["gflops"]]
    flops = statistics.median(m["gflops"] for _, m in rounds) * 1e9
    result: dict[str, Any] = {
        "model": settings.model,
        "weights": engine_settings.weights or "as shipped",
        "weights_in_use": engine.weights_in_use or "as shipped",  # differs if re-encoding failed
        "weights_file": engine.loaded_path,
        "weights_error": engine.weights_error,
        "n_params": params,
        "n_threads": engine.n_threads,
        "n_threads_decode": engine_settings.n_threads_decode,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "n_batch": settings.n_batch,
        "n_ubatch": settings.n_ubatch or settings.n_batch,
        "flash_attn": settings.flash_attn,
        "prompt_lookup": settings.prompt_lookup,
        "llama_system_info": _system_info(),
        "load_s": round(load_s, 3),
        "regions": len(regions),
        "seed": settings.seed,
        **_path_figures(digests, regions, model_s),
        "deterministic": _path_figures(det_digests, regions, det_s),
        "model_digests": sum(1 for d in digests if d.method == "model"),
        "gists_written": written,
        "gists_accepted": model.gists_accepted,
        "gists_rejected": model.gists_rejected,
        "gists_rejected_by": dict(sorted(model.rejected_by.items())),
        "gist_hallucination_rate": round(rejected_source / written, 4) if written else 0.0,
        "prefill_tps": round(prefill_tps, 2),
        "decode_tps": round(float(stats["decode_tps"]), 2),
        "prefix_tokens_full": int(stats["prefix_tokens_full"]),
        "prefix_tokens_reused": int(stats["prefix_tokens_reused"]),
        "prefix_reuse_fraction": round(stats["prefix_tokens_reused"] / stats["prefix_tokens_full"], 4)
        if stats["prefix_tokens_full"]
        else 0.0,
        "prompt_tokens_full": int(stats["prompt_tokens"]),
        "prompt_tokens_prefilled": int(stats["prompt_tokens"] - stats["reused_prompt_tokens"]),
        "stable_bytes": again.text == digests[0].text and fresh.text == digests[0].text,
        "numpy_matmul_gflops": round(flops / 1e9, 2),
        "numpy_blas": rounds[0][1]["blas"],
        "numpy_unset_env": rounds[0][1]["unset_env"],
        "prefill_compute_fraction": spread(fractions, 4)["median"],
        "prefill_compute_fraction_spread": spread(fractions, 4),
        "prefill_tps_rounds": [round(tps, 1) for tps, _ in rounds],
        "prefill_tps_probe": round(probe, 2),
        "prefill_compute_fraction_probe": round(probe * 2 * params / flops, 4) if flops else 0.0,
        "prompt_lookup_ab": lookup,
    }
    return judge(
        result,
        [
            Goal("gists_written", exercised(written, written > 0), ">=", 1),
            Goal("prefix_reuse_fraction", result["prefix_reuse_fraction"], ">=", 0.95),
            Goal("compression_ratio", result["compression_ratio"], ">=", 4),
            Goal("fact_retention", result["fact_retention"], ">=", 0.95),
            Goal("prefill_compute_fraction", result["prefill_compute_fraction"], ">=", 0.5),
        ],
    )


def _target(region: Region) -> int:
    return digest_target(sum(i.tokens for i in region.items), BUDGET)


def _system_info() -> str:
    import llama_cpp

    return bytes(llama_cpp.llama_print_system_info()).decode("utf-8", "replace").strip()
