#!/usr/bin/env bash
# K-FAC against first-order optimizers on the seeds' ConvNet and
# Fashion-MNIST (the default data): test accuracy on the full test set every
# EVAL steps, against steps and against seconds of training, in one PNG;
# then the steps and seconds each run needs to reach TARGET test accuracy,
# and K-FAC's per-step cost against momentum SGD's (examples/s after the
# warm-up, from the run summaries).
#
# Runs (batch 128 per global step, 2 threads, Glorot init everywhere):
#   momentum SGD at each rate of SGD_RATES (the best is the baseline),
#   Adam 1e-3, and K-FAC with its defaults apart from the learning rate
#   (KFAC_LR) under each strategy: chief_worker (1 worker),
#   all_workers (2 workers x 64), dedicated_workers (5 tasks: 3 gradient
#   workers x 43, 1 statistics worker, 1 inverse worker).
#
#   bench/run_kfac_convergence.sh [out_dir=bench/results/kfac]
#   env: STEPS (3000) KFAC_STEPS (1500) EVAL (100) TARGET (0.88)
#        SGD_RATES ("0.01 0.03 0.1") KFAC_LR (0.0003) THREADS (2)
#        STRATEGIES ("chief_worker all_workers dedicated_workers")
#
# Needs a build in build/ and python3-matplotlib (apt-get install
# python3-matplotlib) for the plot; prints the table without it.
. "$(dirname "$0")/bench_lib.sh"
out=${1:-bench/results/kfac}
steps=${STEPS:-3000}
kfac_steps=${KFAC_STEPS:-1500}
eval_every=${EVAL:-100}
target=${TARGET:-0.88}
rates=${SGD_RATES:-"0.01 0.03 0.1"}
kfac_lr=${KFAC_LR:-0.0003}
threads=${THREADS:-2}
strategies=${STRATEGIES:-"chief_worker all_workers dedicated_workers"}
bin=${SYNCFAC_BIN:-build/bin/convnet_mnist_single}
need_built "$bin"
mkdir -p "$out"
common=(--init glorot --batch_size 128 --threads "$threads" --eval_every
        "$eval_every" --log_every "$eval_every" --no_progress)

run() { # name, flags...
  local name=$1; shift
  echo "== $name: $*"
  "$bin" "${common[@]}" "$@" --metrics "$out/$name.jsonl" \
    --summary "$out/$name.json" > "$out/$name.log" 2>&1 \
    || { echo "bench: run $name failed, see $out/$name.log" >&2; exit 1; }
}

for lr in $rates; do
  run "momentum_$lr" --optimizer momentum --learning_rate "$lr" --steps "$steps"
done
run adam_0.001 --optimizer adam --learning_rate 0.001 --steps "$steps"
for s in $strategies; do
  case $s in
    chief_worker) topo=(--worker_replicas 1) ;;
    all_workers) topo=(--worker_replicas 2 --replicas_to_aggregate 2
                       --batch_size 64) ;;
    dedicated_workers) topo=(--worker_replicas 5 --batch_size 43) ;;
    *) echo "bench: unknown strategy $s" >&2; exit 1 ;;
  esac
  run "kfac_$s" --optimizer kfac --learning_rate "$kfac_lr" \
    --steps "$kfac_steps" --cov_inv_op_strategy "$s" "${topo[@]}"
done

/usr/bin/python3 bench/kfac_convergence_report.py "$out" "$target"
