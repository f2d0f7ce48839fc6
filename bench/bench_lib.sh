# Sourced first by every bench script (`. "$(dirname "$0")/bench_lib.sh"`):
# strict mode and the repository root as the working directory, which the
# scripts' paths (bench/..., build/bin/...) are relative to; then the
# helpers below.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Exits unless every program named is built (an executable file).
need_built() {
  local p
  for p in "$@"; do
    [ -x "$p" ] || { echo "bench: $p not built (run scripts/build.sh)" >&2; exit 1; }
  done
}

# Sets $out to a fresh temporary directory, removed when the script exits.
scratch_dir() {
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
}

# Draws the results under $1 into docs/figures (bench/scale.py plot, in the
# plotting venv of bench/plot_venv.sh) and names the figure $2.
plot_scale() {
  bash bench/plot_venv.sh
  bench/results/venv/bin/python bench/scale.py plot --out "$1" --figures docs/figures
  echo "plot: docs/figures/$2"
}
