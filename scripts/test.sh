#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: install what is
# missing, build, run every CTest suite, then say what did not run.
# Arguments go to ctest (e.g. -R kernels_ -j2).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${SYNCFAC_BUILD_DIR:-build}
scripts/install-deps.sh test
# The tests' venv (PyPI packages that read syncfac's output), made once.
scripts/test-venv.sh "$build"
# Every command and package the tests call is there: a test never skips
# for a missing tool (docs/testing.md, "Skips"); it would fail instead.
scripts/install-deps.sh --check test
# The tests on, also in a build directory scripts/run.sh configured
# without them.
scripts/build.sh -DBUILD_TESTING=ON
report="$(cd "$build" && pwd)/ctest-report.xml"
# One entry per core at a time (the suites pass on a busy machine); a -j
# among the arguments wins.
export CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-$(nproc)}
rm -f "$report"
status=0
(cd "$build" && ctest --output-on-failure --no-tests=error \
   --output-junit "$report" "$@") || status=$?
# One block: the machine, and every entry that did not run with its reason.
# An entry skipped for anything but hardware this machine lacks fails the
# run.
echo
scripts/cpu-levels.sh
python3 scripts/skipped_tests.py "$report" || status=1
exit $status
