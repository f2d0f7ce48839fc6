#!/usr/bin/env bash
# The ConvNet training step per instruction-set level of syncfac's CPU
# kernels (kernels/cpu/isa.hpp, --isa) beside PyTorch 2.x from PyPI in a
# virtual environment, on the same ConvNet (bench/peers/torch_convnet.py, or
# the script TORCH_PEER names, as in bench/run_vs_torch.sh, whose Debian
# PyTorch 1.13 run stays there):
# batch 128, momentum SGD, 200 timed steps after 20 warm-up, 1 and 2
# threads, RUNS interleaved rounds (every level and PyTorch back to back
# within a round, so a busy spell hits all alike). Also, every round, the
# FP32 FMA peak per level (bench_fma_peak) and the conv path's rate
# (bench_kernels --step-only: the step's four conv ops, best of 20 steps);
# the conv path's share of the peak is best rate over best peak, as a busy
# core only ever slows either down. Prints medians, the spread (min-max)
# and the ratios, and the load average before and after (the machine is
# shared).
#
#   bench/run_isa_vs_torch.sh [runs=3]
#
# TORCH_PY: a Python with torch 2.x; unset, the peers' venv is used
# (bench/peers/venv.sh: bench/.venv or PEERS_VENV, made with `python3 -m
# venv` and `pip install torch numpy` from PyPI when missing). SYNCFAC_BIN_DIR (default build/bin) must hold
# convnet_mnist_single, bench_fma_peak and bench_kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
bin_dir=${SYNCFAC_BIN_DIR:-build/bin}
peer=${TORCH_PEER:-bench/peers/torch_convnet.py}
for b in convnet_mnist_single bench_fma_peak bench_kernels; do
  [ -x "$bin_dir/$b" ] || { echo "bench: $bin_dir/$b not built (set SYNCFAC_BIN_DIR)" >&2; exit 1; }
done
[ -f "$peer" ] || { echo "bench: PyTorch peer $peer not found (set TORCH_PEER)" >&2; exit 1; }
[ -n "${TORCH_PY:-}" ] || TORCH_PY=$(bench/peers/venv.sh torch)
torch_version=$("$TORCH_PY" -c 'import torch; print(torch.__version__)') \
  || { echo "bench: $TORCH_PY cannot import torch" >&2; exit 1; }
case "$torch_version" in
  2.*) ;;
  *) echo "bench: $TORCH_PY has torch $torch_version, not 2.x" >&2; exit 1 ;;
esac

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cat /proc/loadavg > "$out/load_before"
"$bin_dir/bench_fma_peak" --threads 1,2 --seconds 0.5 | tee "$out/peak_r0.txt"
levels=$(awk '/^fma peak/ {print $3}' "$out/peak_r0.txt" | sort -u | tr '\n' ' ')
[ -n "$levels" ] || { echo "bench: bench_fma_peak found no level" >&2; exit 1; }
for r in $(seq 1 "$runs"); do
  [ "$r" -eq 1 ] || "$bin_dir/bench_fma_peak" --threads 1,2 --seconds 0.5 > "$out/peak_r$r.txt"
  for t in 1 2; do
    line="run $r threads $t:"
    for l in $levels; do
      "$bin_dir/convnet_mnist_single" --isa "$l" --steps 220 --warmup 20 \
        --batch_size 128 --optimizer momentum --learning_rate 0.01 \
        --threads "$t" --seed "$r" --no_final_eval --no_progress \
        --log_every 1000 --summary "$out/syncfac_${l}_t${t}_r$r.json" \
        > "$out/syncfac_${l}_t${t}_r$r.log" 2>&1
      line="$line $l $(grep -o '"examples_per_s": [0-9.]*' "$out/syncfac_${l}_t${t}_r$r.json" | awk '{print $2}')"
    done
    env OMP_NUM_THREADS="$t" "$TORCH_PY" "$peer" --optimizer momentum \
      --lr 0.01 --batch 128 --steps 220 --warmup 20 --eval_every 0 \
      --threads "$t" --seed "$r" --summary_json "$out/torch_t${t}_r$r.json" \
      > "$out/torch_t${t}_r$r.log" 2>&1
    echo "$line | torch $torch_version $(grep -o '"examples_per_s": [0-9.]*' "$out/torch_t${t}_r$r.json" | awk '{print $2}')"
    for l in $levels; do
      "$bin_dir/bench_kernels" --isa "$l" --threads "$t" --seconds 0.5 \
        --step-only > "$out/kernels_${l}_t${t}_r$r.txt"
    done
  done
done
cat /proc/loadavg > "$out/load_after"

python3 - "$out" "$runs" "$torch_version" $levels <<'PY'
import json, re, statistics, sys
out, runs, tv, levels = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def eps(name, t):
    v = []
    for r in range(1, runs + 1):
        with open(f"{out}/{name}_t{t}_r{r}.json") as f:
            v.append(json.loads(f.readline())["examples_per_s"])
    return v
def conv_share(level, t):
    v = []
    for r in range(1, runs + 1):
        text = open(f"{out}/kernels_{level}_t{t}_r{r}.txt").read()
        m = re.search(r"conv path threads=\d+\s+[0-9.]+ ms\s+([0-9.]+) GFLOP/s", text)
        v.append((float(m.group(1)),))
    return v
def span(v, fmt="{:,.0f}"):
    return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}-{fmt.format(max(v))})"
peaks = {}  # (level, threads) -> every measurement
for r in range(0, runs + 1):
    try:
        lines = open(f"{out}/peak_r{r}.txt").readlines()
    except FileNotFoundError:
        continue
    for line in lines:
        m = re.match(r"fma peak (\S+)\s+threads=(\d+)\s+([0-9.]+)", line)
        if m:
            peaks.setdefault((m.group(1), int(m.group(2))), []).append(float(m.group(3)))
print()
print(f"load average before: {open(out + '/load_before').read().split()[:3]}, "
      f"after: {open(out + '/load_after').read().split()[:3]} (2 cores)")
print(f"medians of {runs} interleaved runs, (min-max) the spread")
print()
print(f"| threads | ISA | syncfac ex/s | PyTorch {tv} ex/s | ratio (median; min-max) | FMA peak GFLOP/s (best; median) | conv path GFLOP/s | best conv path / best peak |")
print("|---|---|---|---|---|---|---|---|")
for t in (1, 2):
    p = eps("torch", t)
    pm = statistics.median(p)
    for l in levels:
        s = eps(f"syncfac_{l}", t)
        ratios = [a / b for a, b in zip(s, p)]
        cs = conv_share(l, t)
        pk = peaks.get((l, t), [0])
        best_conv = max(c[0] for c in cs)
        print(f"| {t} | {l} | {span(s)} | {span(p)} | {statistics.median(s)/pm:.2f}x; "
              f"{min(ratios):.2f}-{max(ratios):.2f}x | {max(pk):.0f}; {statistics.median(pk):.0f} | "
              f"{span([c[0] for c in cs], '{:.0f}')} | {100 * best_conv / max(pk):.0f} % |")
PY
