#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: install what is
# missing, build, run every CTest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Every command the tests call is there (a test that skips for a missing
# one would hide it otherwise).
scripts/install-deps.sh --check
scripts/build.sh
cd "${SYNCFAC_BUILD_DIR:-build}"
ctest --output-on-failure --no-tests=error "$@"
