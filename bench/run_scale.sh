#!/usr/bin/env bash
# The sync protocol at scale (docs/benchmarks-history.md, "Hundreds of workers"):
# the real chief, PS shards and N workers whose device is the benchmark
# delay device (compute = a delay, zero gradients; a small MLP), in one
# process for N = WORKERS and as one process per task on loopback for
# N = PROCS: global steps/s, token wait, CPU per global step (the process's,
# and the chief's and ps:0's as processes), memory per worker, bytes per
# worker step against the minimum. Then the plot docs/figures/
# scale_steps_per_s.png (matplotlib in bench/results/venv, made here).
#
#   bench/run_scale.sh [out=bench/results/scale]
#   env: WORKERS (8,32,128,512) PROCS (4,8,16) REPEATS (3) STEPS (400)
#        PROC_STEPS (300) DELAY_MS (2) PS (2) HIDDEN (8)
. "$(dirname "$0")/bench_lib.sh"
out=${1:-bench/results/scale}
bin=${SYNCFAC_BIN_DIR:-build/bin}
need_built "$bin"/{convnet_mnist_single,convnet_mnist_distributed}
python3 bench/scale.py scale --bin "$bin" --out "$out" \
  --workers "${WORKERS:-8,32,128,512}" --procs "${PROCS:-4,8,16}" \
  --repeats "${REPEATS:-3}" --steps "${STEPS:-400}" \
  --proc_steps "${PROC_STEPS:-300}" --delay_ms "${DELAY_MS:-2}" \
  --ps "${PS:-2}" --hidden "${HIDDEN:-8}"
plot_scale "$out" scale_steps_per_s.png
