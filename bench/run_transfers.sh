#!/usr/bin/env bash
# Bytes and messages per step against the minimum of one push and one pull
# of the parameters per worker step (docs/benchmarks-history.md, "Transfers per
# step"): in one process, the MLP (111k parameters), R = N for N in NS,
# 2 PS shards, RUNS runs each; from the summaries' "transfers".
#
#   bench/run_transfers.sh [runs=3] [steps=200]
#   env: NS ("3 8")
. "$(dirname "$0")/bench_lib.sh"
runs=${1:-3}
steps=${2:-200}
bin=${SYNCFAC_BIN:-build/bin/convnet_mnist_single}
need_built "$bin"
scratch_dir
for n in ${NS:-3 8}; do
  for r in $(seq 1 "$runs"); do
    "$bin" --fake_data --fake_train_size 2048 --fake_test_size 200 \
      --batch_size 16 --model mlp --seed 5 --no_progress --no_final_eval \
      --log_every 1000 --threads 1 --steps "$steps" --worker_replicas "$n" \
      --replicas_to_aggregate "$n" --ps_tasks 2 \
      --summary "$out/n${n}_$r.json" > /dev/null
  done
done
python3 - "$out" "$runs" "${NS:-3 8}" <<'PY'
import json, sys
out, runs, ns = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
print("| N = R | bytes per worker step vs minimum (min–max) | unused pull answers per 100 worker steps | messages per global step: workers / shards / chief |")
print("|---|---|---|---|")
for n in ns:
    ts = [json.load(open(f"{out}/n{n}_{r}.json"))["transfers"] for r in range(1, runs + 1)]
    ratios = sorted(t["ratio_to_minimum"] for t in ts)
    unused = sorted(100 * t["bytes_pulled_unused"] / t["parameter_bytes"] / t["worker_steps"] for t in ts)
    msg = [sorted(t[k]["messages_per_global_step"] for t in ts)[len(ts) // 2] for k in ("sent_by_workers", "sent_by_shards", "sent_by_chief")]
    print(f"| {n} | {ratios[len(ratios)//2]:.3f}x ({ratios[0]:.3f}–{ratios[-1]:.3f}) | "
          f"{unused[len(unused)//2]:.1f} | {msg[0]:.1f} / {msg[1]:.1f} / {msg[2]:.1f} |")
PY
