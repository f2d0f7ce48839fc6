#!/usr/bin/env bash
# The ResNet-20 training step against PyTorch 2.x (issue 35 item 4;
# docs/benchmarks.md, "ResNet-20 against PyTorch"): the same model
# (examples/models/resnet20.json; bench/peers/torch_convnet.py --model
# resnet20), data (Fashion-MNIST), batch (128), optimizer (momentum SGD, lr
# 0.05) and thread count (1 and 2), STEPS steps of which the first WARMUP
# are left out. PyTorch runs four ways, eager and torch.compile, NCHW and
# channels-last; the faster of them (by median) is the peer. In each round
# every program runs once, syncfac first in odd rounds and last in even
# ones. One JSON line per run goes to bench/results/resnet_vs_torch.jsonl
# (commit, command, CPU model and flags' ISA level, load average before
# and after, examples/s, user and system CPU seconds); then a table of
# medians with min–max and the ratios.
#
#   bench/run_resnet_vs_torch.sh [rounds=3]
#   env: SYNCFAC_BIN_DIR (build/bin), STEPS (60), WARMUP (10)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
rounds=${1:-3}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench: rounds '$rounds' is not a positive integer" >&2; exit 2; }
bin_dir=${SYNCFAC_BIN_DIR:-build/bin}
steps=${STEPS:-60}
warmup=${WARMUP:-10}
need_built "$bin_dir/convnet_mnist_single"
py=$(bench/peers/venv.sh torch)
scratch_dir
mkdir -p bench/results
python3 - "$out" "$rounds" "$bin_dir" "$py" "$steps" "$warmup" <<'PY'
import json, os, statistics, sys
sys.path.insert(0, "bench")
from run_record import append, commit, cpu_model, lscpu, timed_run
out, rounds, bin_dir, py, steps, warmup = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
commit, lscpu = commit(), lscpu()
cpu = cpu_model(lscpu)
isa = "avx512" if " avx512f" in lscpu else "avx2"
results = "bench/results/resnet_vs_torch.jsonl"
def syncfac(t, r):
    summary = f"{out}/syncfac_{t}_{r}.json"
    cmd = [f"{bin_dir}/convnet_mnist_single", "--model_file", "examples/models/resnet20.json",
           "--steps", str(steps), "--warmup", str(warmup), "--batch_size", "128",
           "--optimizer", "momentum", "--learning_rate", "0.05", "--threads", str(t),
           "--seed", str(r), "--eval_every", "0", "--no_final_eval", "--no_progress",
           "--log_every", "1000", "--summary", summary]
    return cmd, lambda: json.load(open(summary))["examples_per_s"]
def torch(t, r, compiled, channels_last):
    summary = f"{out}/torch_{t}_{r}_{compiled}_{channels_last}.json"
    cmd = [py, "bench/peers/torch_convnet.py", "--model", "resnet20", "--steps", str(steps),
           "--warmup", str(warmup), "--batch", "128", "--optimizer", "momentum", "--lr", "0.05",
           "--threads", str(t), "--seed", str(r), "--summary_json", summary]
    if compiled:
        cmd.append("--compile")
    if channels_last:
        cmd.append("--channels_last")
    return cmd, lambda: json.loads(open(summary).read().splitlines()[-1])["examples_per_s"]
def run(name, t, r, made):
    cmd, figure = made
    timing = timed_run(cmd, 3600, env=dict(os.environ, OMP_NUM_THREADS=str(t)))
    shown = [x for x in cmd if not x.startswith(out)]
    rec = {"commit": commit, "program": name, "threads": t, "round": r, "command": " ".join(shown),
           "cpu": cpu, "isa": isa, "nproc": os.cpu_count(), **timing,
           "examples_per_s": figure()}
    return append(results, rec)
peers = [("torch eager NCHW", False, False), ("torch eager channels-last", False, True),
         ("torch.compile NCHW", True, False), ("torch.compile channels-last", True, True)]
recs = []
for r in range(1, rounds + 1):
    for t in (1, 2):
        runs = [("syncfac", lambda: syncfac(t, r))] + [(n, (lambda c=c, l=l: torch(t, r, c, l))) for n, c, l in peers]
        if r % 2 == 0:
            runs.reverse()
        for name, made in runs:
            recs.append(run(name, t, r, made()))
def mmm(xs):
    xs = sorted(xs)
    return f"{statistics.median(xs):,.0f} ({', '.join(f'{x:,.0f}' for x in xs)})"
print(f"\nCPU: {cpu} ({isa}); {rounds} rounds of {steps} steps ({warmup} warm-up); results appended to {results}\n")
print("| threads | program | examples/s: median (every round) | user+sys CPU s (median) |")
print("|---|---|---|---|")
for t in (1, 2):
    best = None
    for name in ["syncfac"] + [p[0] for p in peers]:
        rs = [x for x in recs if x["threads"] == t and x["program"] == name]
        med = statistics.median(x["examples_per_s"] for x in rs)
        cpu_s = statistics.median(x["user_s"] + x["sys_s"] for x in rs)
        print(f"| {t} | {name} | {mmm([x['examples_per_s'] for x in rs])} | {cpu_s:.1f} |")
        if name != "syncfac" and (best is None or med > best[1]):
            best = (name, med)
    ours = statistics.median(x["examples_per_s"] for x in recs if x["threads"] == t and x["program"] == "syncfac")
    print(f"| {t} | syncfac / {best[0]} | {ours / best[1]:.2f}x | |")
PY
