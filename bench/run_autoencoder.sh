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
# binary's default), BATCH (256), EVAL_EVERY (50), EVAL_EXAMPLES (5000),
# MOMENTUM_LRS ("0.001 0.003 0.006"), KFAC_LR (0.01), KFAC_DAMPING (0.1),
# KFAC_FLAGS (extra K-FAC flags), KFAC_STEPS (steps of the K-FAC run: half
# the momentum steps by default, as a K-FAC step costs ~3.5x a momentum
# step here), SEED (0), EXTRA_FLAGS (passed to every run, e.g.
# "--fake_data --hidden 64,8" for a quick check of this script). About 12 minutes on 2 cores with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
steps=${1:-600}
threads=${2:-2}
bin=${SYNCFAC_BIN:-build/bin/autoencoder_mnist}
need_built "$bin"
batch=${BATCH:-256}
eval_every=${EVAL_EVERY:-50}
eval_examples=${EVAL_EXAMPLES:-5000}
momentum_lrs=${MOMENTUM_LRS:-"0.001 0.003 0.006"}
kfac_lr=${KFAC_LR:-0.01}
kfac_damping=${KFAC_DAMPING:-0.1}
kfac_steps=${KFAC_STEPS:-$((steps / 2))}
seed=${SEED:-0}
data=()
[ -n "${DATA_DIR:-}" ] && data=(--data_dir "$DATA_DIR")
scratch_dir
common=("${data[@]}" --batch_size "$batch" --eval_every "$eval_every"
        --eval_examples "$eval_examples" --threads "$threads" --seed "$seed"
        --log_every "$eval_every" --no_progress)
# shellcheck disable=SC2206
common+=(${EXTRA_FLAGS:-})
for lr in $momentum_lrs; do
  echo "momentum, learning rate $lr: $steps steps" >&2
  "$bin" "${common[@]}" --steps "$steps" --optimizer momentum \
    --learning_rate "$lr" > "$out/momentum_$lr.log"
done
echo "kfac, learning rate $kfac_lr, damping $kfac_damping: $kfac_steps steps" >&2
# shellcheck disable=SC2086
"$bin" "${common[@]}" --steps "$kfac_steps" --optimizer kfac \
  --learning_rate "$kfac_lr" --damping "$kfac_damping" ${KFAC_FLAGS:-} \
  > "$out/kfac.log"
python3 - "$out" "$momentum_lrs" "$kfac_lr" "$kfac_damping" "$batch" \
  "$threads" "$eval_examples" "${KFAC_FLAGS:-}" <<'PY'
import re, sys
out, lrs, kfac_lr, damping, batch, threads, examples, kflags = sys.argv[1:9]
line = re.compile(r"global_step: (\d+) \| reconstruction_error: (\S+) "
                  r"\((\d+) examples\) \| train_s: (\S+) \| wall_s: (\S+)")
def curve(name):
    text = open(f"{out}/{name}.log").read()
    return [(int(s), float(e), float(t), float(w))
            for s, e, _, t, w in line.findall(text)]
runs = {f"momentum lr {lr}": curve(f"momentum_{lr}") for lr in lrs.split()}
best = min(runs, key=lambda k: runs[k][-1][1])
kfac = curve("kfac")
target = min(e for _, e, _, _ in runs[best])
def reach(c):
    for s, e, t, w in c:
        if e <= target:
            return s, t, w
    return None
print(f"\nDeep autoencoder, batch {batch}, {threads} threads; training "
      f"reconstruction error on the first {examples} training images")
print("\n| run | final error | best error | steps | train s | s/step |")
print("|---|---|---|---|---|---|")
for name, c in list(runs.items()) + [(f"kfac lr {kfac_lr} damping {damping}"
                                       + (f" {kflags}" if kflags else ""), kfac)]:
    s, e, t, w = c[-1]
    print(f"| {name}{' (best momentum)' if name == best else ''} | {e:.2f} "
          f"| {min(x[1] for x in c):.2f} | {s} | {t:.1f} | {t / s:.3f} |")
print(f"\ntarget: {target:.2f}, the best error of {best}")
print("\n| optimizer | steps to target | train s to target | wall s to target |")
print("|---|---|---|---|")
m, k = reach(runs[best]), reach(kfac)
for name, r in (("momentum", m), ("kfac", k)):
    print(f"| {name} | " + (" | ".join([str(r[0]), f"{r[1]:.1f}", f"{r[2]:.1f}"])
                            if r else "not reached | - | -") + " |")
if m and k:
    print(f"\nmomentum / kfac: {m[0] / k[0]:.2f}x steps, "
          f"{m[1] / k[1]:.2f}x train seconds, {m[2] / k[2]:.2f}x wall seconds")
print("\nerror at each evaluation (step: momentum best | kfac)")
kf = {s: e for s, e, _, _ in kfac}
for s, e, _, _ in runs[best]:
    print(f"  {s}: {e:.2f} | " + (f"{kf[s]:.2f}" if s in kf else "-"))
PY
