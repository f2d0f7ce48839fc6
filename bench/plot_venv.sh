#!/usr/bin/env bash
# The benchmarks' own virtual environment for their plots (matplotlib from
# PyPI), in bench/results/venv; made once, reused after.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=bench/results/venv
if ! "$venv/bin/python" -c 'import matplotlib' 2> /dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet matplotlib
fi
