#!/usr/bin/env bash
# Row pulls against whole pulls of an embedding table (docs/benchmarks.md,
# "Sparse pulls"): the language-identification example with its default
# 262,144 x 32 table (33.5 MB), in one process (chief, 3 workers, 2 PS
# shards, Adam), ROUNDS interleaved rounds, each running both modes (row
# pulls first in odd rounds, --whole_pulls first in even ones). One JSON
# line per run goes to bench/results/sparse_pulls.jsonl: commit, command,
# CPU model, load average before and after, examples/s, bytes pulled and
# pushed per worker step (the summary's "transfers"; pulled also without
# each worker's first pull, which is whole), test accuracy, user
# and system CPU seconds; then a table of medians with min–max.
#
#   bench/run_sparse_pulls.sh [rounds=3] [steps=300]
#   env: SYNCFAC_BIN_DIR (build/bin), THREADS (2)
. "$(dirname "$0")/bench_lib.sh"
rounds=${1:-3}
steps=${2:-300}
bin_dir=${SYNCFAC_BIN_DIR:-build/bin}
threads=${THREADS:-2}
need_built "$bin_dir/langid_data" "$bin_dir/convnet_mnist_single"
scratch_dir
mkdir -p bench/results
"$bin_dir/langid_data" --out "$out/lid.npz" --model_out "$out/lid.json" \
  > "$out/langid_data.log"
python3 - "$out" "$rounds" "$steps" "$bin_dir" "$threads" <<'PY'
import json, os, statistics, sys
sys.path.insert(0, "bench")
from protocol import append, commit, cpu_model, median_range, timed_run
out, rounds, steps, bin_dir, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
commit, cpu = commit(), cpu_model()
results = "bench/results/sparse_pulls.jsonl"
def run(mode, r):
    summary = f"{out}/{mode}_{r}.json"
    cmd = [f"{bin_dir}/convnet_mnist_single", "--data", f"{out}/lid.npz", "--model_file", f"{out}/lid.json",
           "--worker_replicas", "3", "--ps_tasks", "2", "--optimizer", "adam", "--learning_rate", "0.01",
           "--steps", str(steps), "--batch_size", "64", "--threads", threads, "--no_progress",
           "--log_every", "1000", "--summary", summary]
    if mode == "whole":
        cmd.append("--whole_pulls")
    timing = timed_run(cmd, 1800)
    s = json.load(open(summary))
    t = s["transfers"]
    shown = [x for x in cmd if x not in ("--summary", summary)]
    rec = {"commit": commit, "mode": mode, "round": r, "command": " ".join(shown),
           "cpu": cpu, "nproc": os.cpu_count(), **timing,
           "examples_per_s": s["examples_per_s"],
           "bytes_pulled_per_worker_step": t["bytes_pulled"] / t["worker_steps"],
           # Each worker's first pull takes every variable whole (its
           # copy of the table starts there): the steps' own pulls.
           "bytes_pulled_per_worker_step_after_first": (t["bytes_pulled"] - s["workers"] * t["parameter_bytes"]) / t["worker_steps"],
           "bytes_pushed_per_worker_step": t["bytes_pushed"] / t["worker_steps"],
           "test_accuracy": s["test_accuracy"],
           "runtime_overhead": s.get("runtime_overhead")}
    return append(results, rec)
recs = {"rows": [], "whole": []}
for r in range(1, rounds + 1):
    order = ["rows", "whole"] if r % 2 else ["whole", "rows"]
    for mode in order:
        recs[mode].append(run(mode, r))
mmm = median_range
n0 = lambda x: f"{x:,.0f}"
print(f"\nCPU: {cpu}; {rounds} rounds, {steps} steps; results appended to {results}\n")
print("| pulls | examples/s | bytes pulled / worker step | the same after the first pull | bytes pushed / worker step | pulled / pushed | test accuracy | user+sys CPU s |")
print("|---|---|---|---|---|---|---|---|")
for mode in ("rows", "whole"):
    rs = recs[mode]
    print(f"| {mode} | {mmm([x['examples_per_s'] for x in rs], n0)} | "
          f"{mmm([x['bytes_pulled_per_worker_step'] for x in rs], n0)} | "
          f"{mmm([x['bytes_pulled_per_worker_step_after_first'] for x in rs], n0)} | "
          f"{mmm([x['bytes_pushed_per_worker_step'] for x in rs], n0)} | "
          f"{mmm([x['bytes_pulled_per_worker_step'] / x['bytes_pushed_per_worker_step'] for x in rs], lambda v: f'{v:.2f}')} | "
          f"{mmm([x['test_accuracy'] for x in rs], lambda v: f'{v:.4f}')} | "
          f"{mmm([x['user_s'] + x['sys_s'] for x in rs], lambda v: f'{v:.1f}')} |")
ratio = statistics.median(x["examples_per_s"] for x in recs["rows"]) / statistics.median(x["examples_per_s"] for x in recs["whole"])
print(f"\nexamples/s, rows / whole (medians): {ratio:.2f}x")
PY
