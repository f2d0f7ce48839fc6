#!/usr/bin/env bash
# The classic K-FAC benchmark: the deep autoencoder 784-1000-500-250-30-
# 250-500-1000-784 (sigmoid units, linear code, Bernoulli output) on
# Fashion-MNIST (the default data), momentum SGD against K-FAC. Momentum
# runs a small learning-rate grid and the best run (lowest final error)
# stands for it. Every EVAL_EVERY steps each run measures the training
# reconstruction error (mean over the first EVAL_EXAMPLES training images
# of sum_pixels (x - sigmoid(logit))^2). The target is the best error
# momentum reaches; printed: the steps and the seconds each optimizer needs
# to reach it (training time without the evaluations, and wall time), and
# the ratios.
#
#   bench/run_autoencoder.sh [steps=600] [threads=2]
#
# Environment: SYNCFAC_BIN (build/bin/autoencoder_mnist), DATA_DIR (the
# binary's default), BATCH (256), EVAL_EVERY (25: momentum's evaluations),
# KFAC_EVAL_EVERY (5: K-FAC's, which reaches the target within a few dozen
# steps), EVAL_EXAMPLES (5000), MOMENTUM_LRS ("0.003 0.006 0.01": the best,
# 0.006, inside the grid), KFAC_LR (0.01), KFAC_DAMPING (0.03), KFAC_INVERT_EVERY
# (5), KFAC_INVERSE (explicit), KFAC_PRECISION (bf16 where the CPU runs
# bfloat16 products, AMX or AVX512-BF16, and SYNCFAC_MAX_ISA leaves them the
# avx512 level; else fp32; a list such as "fp32 bf16" runs K-FAC once per
# value),
# KFAC_STATS_EXAMPLES (0: all; examples of each batch behind the factor
# statistics), KFAC_STATS_EVERY (4: steps between statistics; a list such as
# "1 4" runs K-FAC once per value, each against the same target),
# KFAC_MOMENTUM (adam: momentum on the gradient, the step F^-1 v; "regular",
# the ConvNet's default, needs 2x the steps here), KFAC_FLAGS (extra K-FAC
# flags), KFAC_STEPS (150: steps of each K-FAC run), ROUNDS (1: rounds of
# every run, momentum and K-FAC alternating; the seconds printed are the
# medians over the rounds, the errors repeat exactly), SEED (0), EXTRA_FLAGS
# (passed to every run, e.g. "--fake_data --hidden 64,8" for a quick check
# of this script). Besides the training seconds the tables give each
# process's CPU seconds (user + system, /usr/bin/time), the steadier figure
# on a loaded machine. About 4 minutes a round on 2 cores with the defaults.
. "$(dirname "$0")/bench_lib.sh"
steps=${1:-600}
threads=${2:-2}
bin=${SYNCFAC_BIN:-build/bin/autoencoder_mnist}
need_built "$bin"
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time missing (apt-get install time)" >&2; exit 1; }
batch=${BATCH:-256}
eval_every=${EVAL_EVERY:-25}
eval_examples=${EVAL_EXAMPLES:-5000}
momentum_lrs=${MOMENTUM_LRS:-"0.003 0.006 0.01"}
kfac_lr=${KFAC_LR:-0.01}
kfac_damping=${KFAC_DAMPING:-0.03}
kfac_invert_every=${KFAC_INVERT_EVERY:-5}
kfac_inverse=${KFAC_INVERSE:-explicit}
# Every CPU with AMX has AVX512-BF16 too: its flag says whether either
# backend of kernels/cpu/bf16_gemm.hpp runs.
precision_default=fp32
grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null \
  && [[ "${SYNCFAC_MAX_ISA:-avx512}" == avx512 ]] && precision_default=bf16
kfac_precisions=${KFAC_PRECISION:-$precision_default}
kfac_eval_every=${KFAC_EVAL_EVERY:-5}
kfac_stats_examples=${KFAC_STATS_EXAMPLES:-0}
kfac_stats_every=${KFAC_STATS_EVERY:-4}
kfac_momentum=${KFAC_MOMENTUM:-adam}
kfac_steps=${KFAC_STEPS:-150}
rounds=${ROUNDS:-1}
seed=${SEED:-0}
data=()
[ -n "${DATA_DIR:-}" ] && data=(--data_dir "$DATA_DIR")
scratch_dir
common=("${data[@]}" --batch_size "$batch" --eval_examples "$eval_examples"
        --threads "$threads" --seed "$seed" --no_progress)
# shellcheck disable=SC2206
common+=(${EXTRA_FLAGS:-})
kfac_flags="--stats_examples $kfac_stats_examples --kfac_momentum $kfac_momentum --invert_every $kfac_invert_every --inverse $kfac_inverse ${KFAC_FLAGS:-}"
# Each run's log and its CPU seconds (user + system) in $out/NAME.R.{log,cpu}.
timed() {
  local name=$1
  shift
  /usr/bin/time -f "%U %S" -o "$out/$name.cpu" "$bin" "$@" > "$out/$name.log"
}
echo "load before: $(uptime)" >&2
for ((r = 0; r < rounds; ++r)); do
  for lr in $momentum_lrs; do
    echo "round $r: momentum, learning rate $lr: $steps steps" >&2
    timed "momentum_$lr.$r" "${common[@]}" --steps "$steps" \
      --eval_every "$eval_every" --log_every "$eval_every" \
      --optimizer momentum --learning_rate "$lr"
  done
  for every in $kfac_stats_every; do
    for precision in $kfac_precisions; do
      echo "round $r: kfac, learning rate $kfac_lr, damping $kfac_damping," \
           "$kfac_flags --stats_every $every --kfac_precision $precision:" \
           "$kfac_steps steps" >&2
      # shellcheck disable=SC2086
      timed "kfac_${every}_$precision.$r" "${common[@]}" --steps "$kfac_steps" \
        --eval_every "$kfac_eval_every" --log_every "$kfac_eval_every" \
        --optimizer kfac --learning_rate "$kfac_lr" --damping "$kfac_damping" \
        --stats_every "$every" --kfac_precision "$precision" $kfac_flags
    done
  done
done
echo "load after: $(uptime)" >&2
python3 - "$out" "$momentum_lrs" "$kfac_lr" "$kfac_damping" "$batch" \
  "$threads" "$eval_examples" "$kfac_flags" "$rounds" "$kfac_stats_every" \
  "$kfac_precisions" <<'PY'
import re, statistics, sys
(out, lrs, kfac_lr, damping, batch, threads, examples, kflags, rounds,
 everys, precisions) = sys.argv[1:12]
rounds = int(rounds)
line = re.compile(r"global_step: (\d+) \| reconstruction_error: (\S+) "
                  r"\((\d+) examples\) \| train_s: (\S+) \| wall_s: (\S+)")
def curve(name, r):
    text = open(f"{out}/{name}.{r}.log").read()
    return [(int(s), float(e), float(t), float(w))
            for s, e, _, t, w in line.findall(text)]
def cpu(name, r):
    user, system = open(f"{out}/{name}.{r}.cpu").read().split()[-2:]
    return float(user) + float(system)
def median(xs):
    return statistics.median(xs)
# One entry per run: its curve (errors of round 0, seconds the medians over
# the rounds at each evaluation) and its process CPU seconds (median).
def run(name):
    curves = [curve(name, r) for r in range(rounds)]
    for r, c in enumerate(curves[1:], 1):
        if [e for _, e, _, _ in c] != [e for _, e, _, _ in curves[0]]:
            print(f"note: {name} round {r} has other errors than round 0")
    merged = [(s, e, median([c[i][2] for c in curves]),
               median([c[i][3] for c in curves]))
              for i, (s, e, _, _) in enumerate(curves[0])]
    return merged, median([cpu(name, r) for r in range(rounds)])
runs = {f"momentum lr {lr}": run(f"momentum_{lr}") for lr in lrs.split()}
best = min(runs, key=lambda k: runs[k][0][-1][1])
kfac_names = []
variants = [(e, p) for e in everys.split() for p in precisions.split()]
for every, precision in variants:
    kfac_names.append(f"kfac lr {kfac_lr} damping {damping} {kflags.strip()} "
                      f"--stats_every {every} --kfac_precision {precision}")
    runs[kfac_names[-1]] = run(f"kfac_{every}_{precision}")
target = min(e for _, e, _, _ in runs[best][0])
def reach(c):
    for s, e, t, w in c:
        if e <= target:
            return s, t, w
    return None
print(f"\nDeep autoencoder, batch {batch}, {threads} threads; training "
      f"reconstruction error on the first {examples} training images; "
      f"{rounds} round(s), seconds are medians")
print("\n| run | final error | best error | steps | train s | s/step "
      "| CPU s (process) | CPU s/step |")
print("|---|---|---|---|---|---|---|---|")
for name, (c, cpu_s) in runs.items():
    s, e, t, w = c[-1]
    print(f"| {name}{' (best momentum)' if name == best else ''} | {e:.2f} "
          f"| {min(x[1] for x in c):.2f} | {s} | {t:.1f} | {t / s:.3f} "
          f"| {cpu_s:.1f} | {cpu_s / s:.3f} |")
print(f"\ntarget: {target:.2f}, the best error of {best}")
print("\n| run | steps to target | train s to target | wall s to target "
      "| CPU s to target (steps x CPU s/step) | vs momentum: steps | train s "
      "| wall s | CPU s |")
print("|---|---|---|---|---|---|---|---|---|")
def to_target(name):
    c, cpu_s = runs[name]
    r = reach(c)
    return r and (r[0], r[1], r[2], r[0] * cpu_s / c[-1][0])
m = to_target(best)
for name in [best] + kfac_names:
    r = to_target(name)
    if not r:
        print(f"| {name} | not reached | - | - | - | - | - | - | - |")
        continue
    ratios = (" | ".join(f"{x / y:.2f}x" for x, y in zip(r, m)) if m
              else "- | - | - | -")
    print(f"| {name} | {r[0]} | {r[1]:.1f} | {r[2]:.1f} | {r[3]:.1f} "
          f"| {ratios} |")
print("\nerror at each evaluation (step: momentum best | "
      + " | ".join(f"stats_every {e} {p}" for e, p in variants) + ")")
curves = [{s: e for s, e, _, _ in runs[n][0]} for n in kfac_names]
moment = {s: e for s, e, _, _ in runs[best][0]}
for s in sorted(set(moment) | {s for k in curves for s in k}):
    print(f"  {s}: " + (f"{moment[s]:.2f}" if s in moment else "-") + " | "
          + " | ".join(f"{k[s]:.2f}" if s in k else "-" for k in curves))
PY
