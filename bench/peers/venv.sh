#!/usr/bin/env bash
# The peers' virtual environment: makes it when missing, installs what the
# named peers need from PyPI when it lacks it, and prints its python. The
# venv is never part of the repository (.gitignore has bench/.venv).
#
#   bench/peers/venv.sh torch [tf]      # prints e.g. bench/.venv/bin/python
#
# PEERS_VENV names another venv (default bench/.venv; a relative path is
# taken from the repository's root). Prints the python's absolute path.
# Checks the major versions the peers are written for: torch 2.x, tf 2.x.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${PEERS_VENV:-bench/.venv}
[ $# -gt 0 ] || { echo "peers venv: name the peers: torch and/or tf" >&2; exit 2; }
declare -A module=([torch]=torch [tf]=tensorflow)
declare -A package=([torch]="torch numpy" [tf]="tensorflow-cpu numpy")
for peer in "$@"; do
  [ -n "${module[$peer]:-}" ] || { echo "peers venv: unknown peer '$peer' (torch or tf)" >&2; exit 2; }
done
if [ ! -x "$venv/bin/python" ]; then
  echo "peers venv: making $venv (python3 -m venv)" >&2
  python3 -m venv "$venv" >&2 \
    || { echo "peers venv: python3 -m venv $venv failed (apt-get install python3-venv)" >&2; exit 1; }
fi
for peer in "$@"; do
  if ! "$venv/bin/python" -c "import ${module[$peer]}" 2>/dev/null; then
    echo "peers venv: pip install ${package[$peer]} into $venv (PyPI)" >&2
    "$venv/bin/pip" install -q ${package[$peer]} >&2 \
      || { echo "peers venv: pip install ${package[$peer]} into $venv failed" >&2; exit 1; }
  fi
  version=$("$venv/bin/python" -c "import os; os.environ['TF_CPP_MIN_LOG_LEVEL']='3'; import ${module[$peer]} as m; print(m.__version__)" 2>/dev/null) \
    || { echo "peers venv: $venv cannot import ${module[$peer]}" >&2; exit 1; }
  case "$version" in
    2.*) ;;
    *) echo "peers venv: $venv has ${module[$peer]} $version, the peers need 2.x" >&2; exit 1 ;;
  esac
done
echo "$(cd "$venv" && pwd)/bin/python"
