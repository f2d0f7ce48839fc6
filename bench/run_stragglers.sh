#!/usr/bin/env bash
# Stragglers and what backup workers buy (docs/benchmarks-history.md, "Stragglers
# and backup workers"; Chen et al. 2016, Revisiting Distributed Synchronous
# SGD): R = REPLICAS gradients per step, N = R + b workers for b in BACKUPS,
# every worker's compute DELAY_MS times a factor of mean 1 drawn per step,
# fixed and from DIST (pareto:ALPHA or lognormal:SIGMA); in one process,
# the benchmark delay device. Time per global step, its spread over REPEATS
# runs, the table and docs/figures/stragglers_backups.png.
#
#   bench/run_stragglers.sh [out=bench/results/stragglers]
#   env: REPLICAS (16) BACKUPS (0,1,2,4,8) DIST (pareto:1.5) DELAY_MS (20)
#        STEPS (150) REPEATS (3)
. "$(dirname "$0")/bench_lib.sh"
out=${1:-bench/results/stragglers}
bin=${SYNCFAC_BIN_DIR:-build/bin}
need_built "$bin/convnet_mnist_single"
python3 bench/scale.py stragglers --bin "$bin" --out "$out" \
  --replicas "${REPLICAS:-16}" --backups "${BACKUPS:-0,1,2,4,8}" \
  --dist "${DIST:-pareto:1.5}" --delay_ms "${DELAY_MS:-20}" \
  --steps "${STEPS:-150}" --repeats "${REPEATS:-3}"
plot_scale "$out" stragglers_backups.png
