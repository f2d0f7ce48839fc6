#!/usr/bin/env bash
# Configures and builds syncfac (Release) into build/ (or
# $SYNCFAC_BUILD_DIR); binaries land in build/bin/, test executables in
# build/tests/.
#
#   scripts/build.sh [CMAKE_OPTION...] [--target TARGET...]
#
# CMAKE_OPTION (e.g. -DBUILD_TESTING=ON) goes to the configure step; the
# targets after --target are built instead of everything.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${SYNCFAC_BUILD_DIR:-build}
configure=()
targets=()
while [ $# -gt 0 ]; do
  if [ "$1" = --target ]; then
    shift
    [ $# -gt 0 ] || { echo "build.sh: --target needs at least one target" >&2; exit 2; }
    targets=("$@")
    break
  fi
  configure+=("$1")
  shift
done
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "${configure[@]}"
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}"
else
  cmake --build "$build_dir" -j"$(nproc)"
fi
