#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build,
# and train the seeds' ConvNet on Fashion-MNIST (Debian's
# dataset-fashion-mnist) with synchronous K-FAC through the sync-replica
# runtime (examples/main_job/), then momentum SGD for the same number of
# steps, and print what each reached. Extra arguments go to both runs;
# SYNCFAC_NO_BASELINE=1 skips the momentum run.
#
# It installs only what building and running the main job needs (no test
# tools) and builds only the library and convnet_mnist_single; a build
# directory configured with the tests (scripts/test.sh) keeps them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh runtime build
build_dir=${SYNCFAC_BUILD_DIR:-build}
testing=OFF
if grep -q '^BUILD_TESTING:BOOL=ON' "$build_dir/CMakeCache.txt" 2>/dev/null; then
  testing=ON
fi
scripts/build.sh -DBUILD_TESTING=$testing --target convnet_mnist_single
out=$build_dir/main_job
mkdir -p "$out"
read -r -a kfac_flags < examples/main_job/kfac.flags
read -r -a momentum_flags < examples/main_job/momentum.flags

# A figure of a summary file ("test_accuracy", "train_s", "global_step"),
# to 4 decimals at most.
figure() {
  local x
  x=$(grep -o "\"$2\": [-0-9.e+]*" "$1" | head -n 1 | sed 's/.*: //')
  printf '%.4g' "$x"
}

echo "syncfac main job: synchronous K-FAC, $(cat examples/main_job/kfac.flags)"
"$build_dir/bin/convnet_mnist_single" "${kfac_flags[@]}" --summary "$out/kfac.json" "$@"
if [ "${SYNCFAC_NO_BASELINE:-0}" = 1 ]; then
  exit 0
fi
echo "syncfac main job: momentum SGD for comparison, $(cat examples/main_job/momentum.flags)"
"$build_dir/bin/convnet_mnist_single" "${momentum_flags[@]}" --no_progress \
  --summary "$out/momentum.json" "$@" > "$out/momentum.log" 2>&1 \
  || { cat "$out/momentum.log" >&2; exit 1; }
echo "syncfac main job: after $(figure "$out/kfac.json" global_step) global" \
     "steps, K-FAC reached test accuracy $(figure "$out/kfac.json" test_accuracy)" \
     "in $(figure "$out/kfac.json" train_s) s of training; momentum SGD reached" \
     "$(figure "$out/momentum.json" test_accuracy)" \
     "($(figure "$out/momentum.json" train_s) s; its log: $out/momentum.log)"
