#!/usr/bin/env bash
# Training throughput and peak RSS of syncfac's convnet_mnist_single against
# Debian's PyTorch running the same ConvNet (bench/peers/torch_convnet.py,
# or the script TORCH_PEER names), side by side: batch 128, momentum SGD,
# 200 timed steps after 20 warm-up, no evaluation, 1 and 2 threads, RUNS
# interleaved runs each; prints medians and the syncfac/PyTorch ratios.
#
#   bench/run_vs_torch.sh [runs=3]
#
# Needs python3-torch (apt-get install python3-torch) and a build in build/.
# Torch runs with OPENBLAS_NUM_THREADS=1: Debian's torch otherwise
# oversubscribes the cores (measured: docs/benchmarks-history.md).
. "$(dirname "$0")/bench_lib.sh"
runs=${1:-3}
peer=${TORCH_PEER:-bench/peers/torch_convnet.py}
bin=${SYNCFAC_BIN:-build/bin/convnet_mnist_single}
need_built "$bin"
[ -f "$peer" ] || { echo "bench: PyTorch peer $peer not found (set TORCH_PEER)" >&2; exit 1; }
/usr/bin/python3 -c 'import torch' 2>/dev/null \
  || { echo "bench: python3-torch missing (apt-get install python3-torch)" >&2; exit 1; }

scratch_dir
for r in $(seq 1 "$runs"); do
  for t in 1 2; do
    "$bin" --steps 220 --warmup 20 --batch_size 128 --optimizer momentum \
      --learning_rate 0.01 --threads "$t" --seed "$r" --no_final_eval \
      --no_progress --log_every 1000 --summary "$out/syncfac_t${t}_r$r.json" \
      > "$out/syncfac_t${t}_r$r.log" 2>&1
    env OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$peer" --optimizer momentum \
      --lr 0.01 --batch 128 --steps 220 --warmup 20 --eval_every 0 \
      --threads "$t" --seed "$r" --summary_json "$out/torch_t${t}_r$r.json" \
      > "$out/torch_t${t}_r$r.log" 2>&1
    echo "run $r threads $t: syncfac $(grep -o '"examples_per_s": [0-9.]*' "$out/syncfac_t${t}_r$r.json") | torch $(grep -o '"examples_per_s": [0-9.]*' "$out/torch_t${t}_r$r.json")"
  done
done

python3 - "$out" "$runs" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def load(name, t):
    rows = []
    for r in range(1, runs + 1):
        with open(f"{out}/{name}_t{t}_r{r}.json") as f:
            rows.append(json.loads(f.readline()))
    return rows
print()
print("| threads | syncfac ex/s | PyTorch ex/s | ratio | syncfac peak RSS MiB | PyTorch peak RSS MiB | ratio |")
print("|---|---|---|---|---|---|---|")
for t in (1, 2):
    s, p = load("syncfac", t), load("torch", t)
    se = statistics.median(x["examples_per_s"] for x in s)
    pe = statistics.median(x["examples_per_s"] for x in p)
    sr = statistics.median(x["peak_rss_mib"] for x in s)
    pr = statistics.median(x["peak_rss_mib"] for x in p)
    print(f"| {t} | {se:,.0f} | {pe:,.0f} | {se/pe:.2f}x | {sr:.0f} | {pr:.0f} | {sr/pr:.2f}x |")
PY
