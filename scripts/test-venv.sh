#!/usr/bin/env bash
# The tests' one virtual environment, BUILD_DIR/test-venv: the PyPI
# packages that some tests read their output with (tests/venv-requirements.txt:
# TensorBoard's event-file reader, the safetensors reference
# implementation). Made once by scripts/test.sh and reused; the tests that
# need it fail, naming this script, when it is missing. Debian's python3
# and python3-venv come from scripts/install-deps.sh.
#
#   scripts/test-venv.sh [BUILD_DIR]          make it unless it is there
#   scripts/test-venv.sh --check [BUILD_DIR]  exit 1 unless it is there
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi
build=${1:-${SYNCFAC_BUILD_DIR:-build}}
venv="$build/test-venv"
requirements=tests/venv-requirements.txt
# What the tests import; the stamp holds the requirements it was made from.
ready() {
  "$venv/bin/python" -c 'import tensorboard, safetensors.numpy, numpy' \
    >/dev/null 2>&1 && cmp -s "$requirements" "$venv/requirements.stamp"
}
if ready; then
  [ $check = 1 ] || echo "syncfac: the tests' venv $venv is ready"
  exit 0
fi
if [ $check = 1 ]; then
  echo "syncfac: missing the tests' venv $venv (scripts/test-venv.sh $build makes it)"
  exit 1
fi
echo "syncfac: making the tests' venv $venv (PyPI: $(grep -v '^#' "$requirements" | tr '\n' ' '))"
mkdir -p "$build"
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --timeout 60 \
  --retries 3 -r "$requirements"
cp "$requirements" "$venv/requirements.stamp"
ready || { echo "syncfac: $venv was made but cannot import its packages" >&2; exit 1; }
