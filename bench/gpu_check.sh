#!/usr/bin/env bash
# The prepared GPU check (docs/cuda.md): configure and build with CUDA in
# its own build directory, run the GPU test suites, run the GPU benchmark,
# and print one compact table. Sized for under 8 minutes on one H200.
#
#   bash bench/gpu_check.sh            # from the repository root
#
# Environment: BUILD_DIR (default build-gpu), JOBS (default: all cores),
# CUDA_ARCH (default 90), BENCH_SECONDS (default 2: seconds per ConvNet
# measurement), CPU_MAX_SIZE (default 2048: largest factor the CPU inverts;
# larger sizes are extrapolated and marked "est").
# Exit status: 0 when the tests passed and the benchmark ran; 1 otherwise
# (also when the tests were skipped because no GPU was visible).

set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
CUDA_ARCH=${CUDA_ARCH:-90}
BENCH_SECONDS=${BENCH_SECONDS:-2}
CPU_MAX_SIZE=${CPU_MAX_SIZE:-2048}
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1 \
   && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
stage() { echo "== $* ($(elapsed) s)"; }
fail() { echo "gpu_check: FAILED: $* (after $(elapsed) s)" >&2; exit 1; }

mkdir -p "$BUILD_DIR"
LOG="$BUILD_DIR/gpu_check.log"
: > "$LOG"

stage "device"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm \
    --format=csv,noheader 2>&1 | tee -a "$LOG"
else
  echo "nvidia-smi not found" | tee -a "$LOG"
fi

stage "configure ($BUILD_DIR, CUDA arch $CUDA_ARCH)"
timeout 120 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
  -DSYNCFAC_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
  >>"$LOG" 2>&1 || { tail -40 "$LOG"; fail "cmake configure"; }
grep -q "CUDA compiler found: ON" "$LOG" \
  || { tail -40 "$LOG"; fail "CMake found no CUDA compiler (set CUDACXX)"; }

stage "build ($JOBS jobs)"
TARGETS=(test_kernels_cuda_backend test_kernels_cuda_kfac
         test_kernels_cuda_device_selection test_actors_device_gpu bench_gpu)
timeout 300 cmake --build "$BUILD_DIR" -j"$JOBS" --target "${TARGETS[@]}" \
  >>"$LOG" 2>&1 || { grep -E "error|Error" "$LOG" | head -40; fail "build"; }

stage "tests"
TEST_LOG="$BUILD_DIR/gpu_check_tests.log"
timeout 300 ctest --test-dir "$BUILD_DIR" \
  -R '^(kernels_cuda_(backend|kfac|device_selection)|actors_device_gpu)$' \
  --output-on-failure >"$TEST_LOG" 2>&1
tests_rc=$?
grep -E "Test +#|tests passed|Skipped|Failed|\*\*\*" "$TEST_LOG"
if grep -q "Skipped" "$TEST_LOG"; then
  tests_note="SKIPPED (no GPU visible to the tests)"
  tests_rc=1
elif [ $tests_rc -eq 0 ]; then
  tests_note="passed"
else
  tests_note="FAILED (see $TEST_LOG)"
  tail -60 "$TEST_LOG"
fi

stage "benchmark"
BENCH_OUT="$BUILD_DIR/bench_gpu.txt"
timeout 300 "$BUILD_DIR/bin/bench_gpu" --seconds "$BENCH_SECONDS" \
  --cpu-max-size "$CPU_MAX_SIZE" >"$BENCH_OUT" 2>&1
bench_rc=$?

echo
echo "==================== syncfac GPU check ===================="
cat "$BENCH_OUT"
echo "-----------------------------------------------------------"
echo "GPU tests: $tests_note"
echo "benchmark: $([ $bench_rc -eq 0 ] && echo ok || echo "FAILED (exit $bench_rc)")"
echo "total: $(elapsed) s (build dir $BUILD_DIR, log $LOG)"
echo "==========================================================="
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ]
