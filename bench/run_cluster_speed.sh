#!/usr/bin/env bash
# Steps/s of a loopback cluster (chief, 2 workers, 1 PS shard: one process
# each, via syncfac-launch) against the in-process topology with the same
# roles (convnet_mnist_single --worker_replicas 2), on the same model, batch
# and threads per worker device (ConvNet, batch 128, momentum SGD, fake data
# so that no data loading differs). RUNS interleaved runs each, medians;
# with --tls also the cluster over TLS. Target: cluster >= 0.8x in-process.
#
#   bench/run_cluster_speed.sh [runs=3] [steps=300]
. "$(dirname "$0")/bench_lib.sh"
runs=${1:-3}
steps=${2:-300}
bin=${SYNCFAC_BIN_DIR:-build/bin}
need_built "$bin"/{convnet_mnist_single,convnet_mnist_distributed,syncfac-launch}
scratch_dir

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cluster() {
  echo "{\"cluster\": {\"chief\": [\"127.0.0.1:$(port)\"], \"worker\": [\"127.0.0.1:$(port)\", \"127.0.0.1:$(port)\"], \"ps\": [\"127.0.0.1:$(port)\"]}}" > "$1"
}
common=(--fake_data --fake_train_size 25600 --steps "$steps" --warmup 20
        --batch_size 128 --optimizer momentum --learning_rate 0.01
        --no_final_eval --no_progress --log_every 1000)
for r in $(seq 1 "$runs"); do
  # In one process 2 threads split over the 2 workers: 1 per device.
  "$bin/convnet_mnist_single" "${common[@]}" --threads 2 --worker_replicas 2 \
    --replicas_to_aggregate 2 --summary "$out/inproc_$r.json" > /dev/null
  cluster "$out/c.json"
  "$bin/syncfac-launch" --cluster "$out/c.json" --program "$bin/convnet_mnist_distributed" \
    --max_wall_s 600 -- "${common[@]}" --threads 1 --summary "$out/cluster_$r.json" > "$out/log_$r" 2>&1 \
    || { cat "$out/log_$r"; exit 1; }
  cluster "$out/c.json"
  # One certificate per task (kept across rounds: the same names).
  bash scripts/make-cluster-certs.sh --cluster "$out/c.json" "$out/certs" > /dev/null
  "$bin/syncfac-launch" --cluster "$out/c.json" --program "$bin/convnet_mnist_distributed" \
    --max_wall_s 600 -- "${common[@]}" --threads 1 --tls_dir "$out/certs" \
    --summary "$out/tls_$r.json" > "$out/log_$r" 2>&1 || { cat "$out/log_$r"; exit 1; }
  echo "run $r done"
done
mkdir -p bench/results
python3 - "$out" "$runs" "$steps" <<'PY'
import json, statistics, sys
out, runs, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, "bench")
from summaries import medians
med = medians(out, runs)
base = med("inproc", "examples_per_s")
rows, result = [], {"runs": runs, "steps": int(steps)}
for name, label in (("inproc", "in one process"), ("cluster", "loopback cluster"),
                    ("tls", "loopback cluster, TLS")):
    e = med(name, "examples_per_s")
    w = med(name, "token_wait_share")
    sps = e / (128 * 2)  # each global step takes one batch of each worker
    result[name] = {"examples_per_s": e, "steps_per_s": sps, "token_wait_share": w,
                    "vs_in_process": e / base}
    rows.append(f"| {label} | {sps:.1f} | {e:,.0f} | {e/base:.2f}x | {w:.1%} |")
print(f"\nchief + 2 workers + 1 PS, ConvNet, batch 128, 1 thread per worker device, "
      f"momentum SGD, {steps} steps, median of {runs}")
print("| topology | global steps/s | examples/s | vs in-process | token wait share |")
print("|---|---|---|---|---|")
print("\n".join(rows))
json.dump(result, open("bench/results/cluster_speed.json", "w"), indent=1)
PY
