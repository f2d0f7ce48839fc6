#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: install what is
# missing, build, run every CTest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd "${SYNCFAC_BUILD_DIR:-build}"
ctest --output-on-failure --no-tests=error "$@"
