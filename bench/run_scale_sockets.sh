#!/usr/bin/env bash
# Hundreds of workers over real sockets (docs/benchmarks.md, "Hundreds of
# workers over sockets"): N = WORKERS as PROCS worker processes of N / PROCS
# workers each (--workers_per_task), every worker a remote peer of the
# chief and the PS shards over loopback TCP, the ConvNet's payload (the
# delay device's random gradients): global steps/s, bytes on the wire per
# step (lo's counters in a network namespace of the benchmark's own), the
# chief's and ps:0's CPU per step. One JSON line per N and round in
# bench/results/scale_sockets.jsonl; the table on stdout.
#
#   bench/run_scale_sockets.sh [out=bench/results/scale_sockets]
#   env: WORKERS (32,64,128,256) PROCS (8) ROUNDS (3) STEPS (20,60)
#        DELAY_MS (2) PS (2)
. "$(dirname "$0")/bench_lib.sh"
out=${1:-bench/results/scale_sockets}
bin=${SYNCFAC_BIN_DIR:-build/bin}
need_built "$bin"/convnet_mnist_distributed
python3 bench/scale_sockets.py --bin "$bin" --out "$out" \
  --workers "${WORKERS:-32,64,128,256}" --procs "${PROCS:-8}" \
  --rounds "${ROUNDS:-3}" --steps "${STEPS:-20,60}" \
  --delay_ms "${DELAY_MS:-2}" --ps "${PS:-2}"
