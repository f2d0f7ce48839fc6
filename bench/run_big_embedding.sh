#!/usr/bin/env bash
# A large embedding table on PS shards (issue 37 item 5; docs/benchmarks.md,
# "A large embedding table"): bench_embedding_data's recommendation-style
# data (16 Zipf-distributed, hashed ids per example over 10^7 ids) and its
# model, an embedding_bag of 10^7 x 16 (640 MB) -> dense 2, trained by
# convnet_mnist_single with 2 workers and 4 PS shards (each holds a
# quarter of the table's rows with Adam's two slots), row pulls and sparse
# pushes. ROUNDS runs; one JSON line each goes to
# bench/results/big_embedding.jsonl: commit, command, CPU model, load
# average before and after, examples/s and global steps/s (after the
# warm-up), bytes pulled and pushed per worker step (the summary's
# "transfers", pulled also without each worker's first pull, which is
# whole), test accuracy, peak RSS (one process holds every role), user and
# system CPU seconds; then a table of medians with min–max.
#
#   bench/run_big_embedding.sh [rounds=3] [steps=300]
#   env: SYNCFAC_BIN_DIR (build/bin), THREADS (1), BATCH (256),
#        VOCABULARY (10000000)
. "$(dirname "$0")/bench_lib.sh"
rounds=${1:-3}
steps=${2:-300}
bin_dir=${SYNCFAC_BIN_DIR:-build/bin}
threads=${THREADS:-1}
batch=${BATCH:-256}
vocabulary=${VOCABULARY:-10000000}
need_built "$bin_dir/bench_embedding_data" "$bin_dir/convnet_mnist_single"
scratch_dir
mkdir -p bench/results
"$bin_dir/bench_embedding_data" --vocabulary "$vocabulary" \
  --out "$out/big.npz" --model_out "$out/big.json" > "$out/data.log"
python3 - "$out" "$rounds" "$steps" "$bin_dir" "$threads" "$batch" <<'PY'
import json, os, sys
sys.path.insert(0, "bench")
from protocol import append, commit, cpu_model, median_range, timed_run
out, rounds, steps, bin_dir, threads, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
commit, cpu = commit(), cpu_model()
results = "bench/results/big_embedding.jsonl"
def run(r):
    summary = f"{out}/run_{r}.json"
    cmd = [f"{bin_dir}/convnet_mnist_single", "--data", f"{out}/big.npz", "--model_file", f"{out}/big.json",
           "--worker_replicas", "2", "--ps_tasks", "4", "--optimizer", "adam", "--learning_rate", "0.01",
           "--steps", str(steps), "--batch_size", batch, "--threads", threads, "--no_progress",
           "--log_every", "1000", "--summary", summary]
    timing = timed_run(cmd, 3600)
    s = json.load(open(summary))
    t = s["transfers"]
    shown = [x for x in cmd if x not in ("--summary", summary)]
    rec = {"commit": commit, "round": r, "command": " ".join(shown),
           "cpu": cpu, "nproc": os.cpu_count(), **timing,
           "table_bytes": t["parameter_bytes"],
           "examples_per_s": s["examples_per_s"],
           "global_steps_per_s": s["examples_per_s"] / (int(batch) * s["workers"]),
           "bytes_pulled_per_worker_step": t["bytes_pulled"] / t["worker_steps"],
           "bytes_pulled_per_worker_step_after_first": (t["bytes_pulled"] - s["workers"] * t["parameter_bytes"]) / t["worker_steps"],
           "bytes_pushed_per_worker_step": t["bytes_pushed"] / t["worker_steps"],
           "test_accuracy": s["test_accuracy"],
           "peak_rss_mib": s["peak_rss_mib"]}
    return append(results, rec)
recs = [run(r) for r in range(1, rounds + 1)]
def mmm(key, fmt):
    return median_range((x[key] if isinstance(key, str) else key(x) for x in recs), fmt)
n0 = lambda x: f"{x:,.0f}"
print(f"\nCPU: {cpu}; {rounds} rounds, {steps} steps; results appended to {results}\n")
print("| examples/s | global steps/s | bytes pulled / worker step (after the first pull) | bytes pushed / worker step | test accuracy | peak RSS MiB | user+sys CPU s |")
print("|---|---|---|---|---|---|---|")
print(f"| {mmm('examples_per_s', n0)} | {mmm('global_steps_per_s', lambda v: f'{v:.1f}')} | "
      f"{mmm('bytes_pulled_per_worker_step_after_first', n0)} | {mmm('bytes_pushed_per_worker_step', n0)} | "
      f"{mmm('test_accuracy', lambda v: f'{v:.4f}')} | {mmm('peak_rss_mib', n0)} | "
      f"{mmm(lambda x: x['user_s'] + x['sys_s'], lambda v: f'{v:.1f}')} |")
PY
