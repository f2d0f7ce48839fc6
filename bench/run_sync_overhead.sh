#!/usr/bin/env bash
# Per-step overhead of the sync-replica runtime (chief + 1 worker + 1 PS
# shard as actors) against the plain single-loop trainer, on the same model
# and batch (ConvNet, batch 128, momentum SGD, fake data so that no data
# loading differs); then N = 2 and 4 in-process workers (R = N): examples/s
# and the share of step time spent waiting for tokens. RUNS interleaved runs
# each, medians printed.
#
#   bench/run_sync_overhead.sh [runs=3] [threads=2]
. "$(dirname "$0")/bench_lib.sh"
runs=${1:-3}
threads=${2:-2}
bin=${SYNCFAC_BIN:-build/bin/convnet_mnist_single}
need_built "$bin"
scratch_dir
common=(--fake_data --fake_train_size 25600 --steps 420 --warmup 20
        --batch_size 128 --optimizer momentum --learning_rate 0.01
        --threads "$threads" --no_final_eval --no_progress --log_every 1000)
for r in $(seq 1 "$runs"); do
  "$bin" "${common[@]}" --runtime plain --summary "$out/plain_$r.json" > /dev/null
  for n in 1 2 4; do
    "$bin" "${common[@]}" --runtime sync --worker_replicas "$n" \
      --replicas_to_aggregate "$n" --summary "$out/sync${n}_$r.json" > /dev/null
  done
  echo "run $r done"
done
python3 - "$out" "$runs" "$threads" <<'PY'
import json, statistics, sys
out, runs, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, "bench")
from summaries import medians
med = medians(out, runs)
plain = med("plain", "examples_per_s")
print(f"\nthreads={threads}, batch 128, ConvNet, momentum SGD, median of {runs}")
# runtime_overhead: step time beyond the device's compute time, measured
# inside each run, so machine-speed drift between runs cancels out.
print("| runtime | workers | examples/s | ms per worker step | vs plain | step time beyond compute | token wait share |")
print("|---|---|---|---|---|---|---|")
po = med("plain", "runtime_overhead")
print(f"| plain loop | 1 | {plain:,.0f} | {128000/plain:.2f} | 1.00x | {po:.1%} | - |")
for n in (1, 2, 4):
    e = med(f"sync{n}", "examples_per_s")
    w = med(f"sync{n}", "token_wait_share")
    o = med(f"sync{n}", "runtime_overhead")
    ms = 128000 * n / e  # each worker's step time
    extra = f"{(plain / e - 1) * 100:+.1f}% time/step" if n == 1 else f"{e/plain:.2f}x throughput"
    print(f"| sync | {n} | {e:,.0f} | {ms:.2f} | {extra} | {o:.1%} | {w:.1%} |")
PY
