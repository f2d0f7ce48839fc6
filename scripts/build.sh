#!/usr/bin/env bash
# Configures and builds syncfac (Release) into build/; binaries land in
# build/bin/, test executables in build/tests/.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${SYNCFAC_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build_dir" -j"$(nproc)"
