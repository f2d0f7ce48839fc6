#!/usr/bin/env bash
# The prepared GPU check (docs/cuda.md): configure and build with CUDA in
# its own build directory, run the GPU test suites, run the GPU benchmark,
# and print one compact table. Sized for under 8 minutes on one H200.
#
#   bash bench/gpu_check.sh            # from the repository root
#
# Environment: BUILD_DIR (default build-gpu), JOBS (default: all cores),
# GPU_BUNDLE (a folder made by scripts/gpu_bundle.sh: run its programs
# instead of configuring and building, for GPU machines without the
# project's build dependencies),
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

# prog NAME: the command line (array PROG) that runs a program of the
# build, or of the bundle, so that `timeout` can run it.
prog() {
  if [ -n "${GPU_BUNDLE:-}" ]; then
    PROG=("$GPU_BUNDLE/run" "$1")
  elif [ -x "$BUILD_DIR/bin/$1" ]; then
    PROG=("$BUILD_DIR/bin/$1")
  else
    PROG=("$BUILD_DIR/tests/$1")
  fi
}

TESTS=(test_kernels_cuda_backend test_kernels_cuda_kfac
       test_kernels_cuda_device_selection test_actors_device_gpu)
if [ -n "${GPU_BUNDLE:-}" ]; then
  stage "prebuilt programs from $GPU_BUNDLE"
  ls "$GPU_BUNDLE/bin" | tee -a "$LOG"
else
  stage "configure ($BUILD_DIR, CUDA arch $CUDA_ARCH)"
  timeout 120 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
    -DSYNCFAC_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
    >>"$LOG" 2>&1 || { tail -40 "$LOG"; fail "cmake configure"; }
  grep -q "CUDA compiler found: ON" "$LOG" \
    || { tail -40 "$LOG"; fail "CMake found no CUDA compiler (set CUDACXX)"; }

  stage "build ($JOBS jobs)"
  timeout 300 cmake --build "$BUILD_DIR" -j"$JOBS" --target "${TESTS[@]}" \
    bench_gpu convnet_mnist_single >>"$LOG" 2>&1 \
    || { grep -E "error|Error" "$LOG" | head -40; fail "build"; }
fi

stage "tests"
TEST_LOG="$BUILD_DIR/gpu_check_tests.log"
: > "$TEST_LOG"
tests_rc=0
tests_note="passed"
for t in "${TESTS[@]}"; do
  t0=$(date +%s)
  prog "$t"
  timeout 300 "${PROG[@]}" --log_level=test_suite >>"$TEST_LOG" 2>&1
  rc=$?
  case $rc in
    0) verdict="passed" ;;
    77) verdict="SKIPPED (no GPU visible)"; tests_rc=1
        tests_note="SKIPPED (no GPU visible to the tests)" ;;
    *) verdict="FAILED (exit $rc)"; tests_rc=1
       tests_note="FAILED (see $TEST_LOG)" ;;
  esac
  printf '%-40s %s (%d s)\n' "$t" "$verdict" $(( $(date +%s) - t0 )) \
    | tee -a "$LOG"
done
grep -E "error|failed|fatal" "$TEST_LOG" | grep -v "^Leaving\|no errors" \
  | head -60

stage "training through the actors (sync runtime, fake data)"
TRAIN_OUT="$BUILD_DIR/gpu_train.txt"
: > "$TRAIN_OUT"
train_rc=0
for opt in sgd kfac; do
  for batch in 128 1024; do
    for dev in gpu:0 cpu; do
      prog convnet_mnist_single
      line=$(timeout 60 "${PROG[@]}" --device "$dev" --fake_data \
          --fake_train_size 16384 --steps 200 --warmup 30 \
          --batch_size "$batch" --optimizer "$opt" --no_progress \
          --no_final_eval --threads 0 2>&1 \
        | tee -a "$LOG" | grep -E "^examples/sec" | tail -1)
      [ -n "$line" ] || train_rc=1
      printf 'train %-5s batch %-5s %-6s %s\n' "$opt" "$batch" "$dev" \
        "${line:-FAILED (see $LOG)}" | tee -a "$TRAIN_OUT"
    done
  done
done

stage "benchmark"
BENCH_OUT="$BUILD_DIR/bench_gpu.txt"
prog bench_gpu
timeout 300 "${PROG[@]}" --seconds "$BENCH_SECONDS" \
  --cpu-max-size "$CPU_MAX_SIZE" >"$BENCH_OUT" 2>&1
bench_rc=$?

echo
echo "==================== syncfac GPU check ===================="
cat "$BENCH_OUT"
echo "-----------------------------------------------------------"
cat "$TRAIN_OUT"
echo "-----------------------------------------------------------"
echo "GPU tests: $tests_note"
echo "benchmark: $([ $bench_rc -eq 0 ] && echo ok || echo "FAILED (exit $bench_rc)")"
echo "total: $(elapsed) s (build dir $BUILD_DIR, log $LOG)"
echo "==========================================================="
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $train_rc -eq 0 ]
