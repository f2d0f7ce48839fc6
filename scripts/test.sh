#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: install what is
# missing, build, run every CTest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
# Every command the tests call is there (a test that skips for a missing
# one would hide it otherwise).
scripts/install-deps.sh --check test
# The tests on, also in a build directory scripts/run.sh configured
# without them.
scripts/build.sh -DBUILD_TESTING=ON
cd "${SYNCFAC_BUILD_DIR:-build}"
ctest --output-on-failure --no-tests=error "$@"
