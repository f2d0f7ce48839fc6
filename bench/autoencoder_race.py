#!/usr/bin/env python3
"""The deep autoencoder race, evenly run (docs/benchmarks.md, "The
autoencoder race, evenly run"; issue 37 item 6).

Both optimizers get the same tuning budget and the same rule:

1. Tuning. Each optimizer runs the configurations of its grid (the same
   number for both; bench/race.py checks it) with the tuning seed,
   evaluated on a validation split (the last EVAL_EXAMPLES training
   images, held out of training: autoencoder_mnist --eval_split
   validation) every EVAL_EVERY steps. The configuration with the lowest validation error reached
   within its step budget is selected; ties go to the earlier one.
   Momentum SGD's grid has Nesterov's momentum and a schedule (constant
   or cosine over the run, with a warm-up); K-FAC's varies the learning
   rate and the damping.
2. Report. The two selected configurations run with other seeds, each
   evaluated on the test split (the first EVAL_EXAMPLES test images:
   --eval_split test) at the same granularity (every EVAL_EVERY steps for
   both), rounds interleaved (bench/protocol.py). K-FAC runs once per
   product precision (fp32, and bf16 where the CPU has AMX tiles or
   AVX512-BF16, one of which --kfac_precision bf16 needs).

For each report seed the target is the best test error momentum reached in
its budget; K-FAC's figure is the training seconds (evaluations left out)
and the wall seconds it needed to reach that error, as a share of
momentum's to reach it. The verdict takes the median over the seeds
(target: 0.5x or less).

  autoencoder_race.py --bin build/bin/autoencoder_mnist [--seeds 1,2,3]
                      [--tuning_seed 0] [--threads 2] [--extra "..."]

Every run is one JSON line in bench/results/autoencoder_race.jsonl (the
protocol's record: commit, CPU, load, CPU and wall seconds) with its whole
error curve. Python's standard library only.
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from protocol import Bench  # noqa: E402
from race import Race, product_grid, tune_and_report  # noqa: E402

EVAL_LINE = re.compile(r"global_step: (\d+) \| reconstruction_error: (\S+) "
                       r"\((\d+) examples\) \| train_s: (\S+) \| wall_s: (\S+)")

# The grids: the same number of configurations each, so that neither optimizer is
# tuned more than the other. Momentum's steps are K-FAC's times
# STEP_RATIO: K-FAC's steps cost several momentum steps here, and
# momentum's best error within its longer budget is the target.
# Each grid's rates reach below the rate its optimizer selected on a first,
# narrower run (momentum 0.003, K-FAC 0.003: both at the low edge), so
# that neither selection sits at an edge only because the grid stopped.
MOMENTUM_GRID = product_grid(learning_rate=(0.0015, 0.003, 0.006, 0.01),
                             lr_schedule=("constant", "cosine"))
KFAC_GRID = product_grid(learning_rate=(0.001, 0.003, 0.01, 0.03),
                         damping=(0.01, 0.03))

# K-FAC's settings the grid leaves fixed (bench/run_autoencoder.sh's).
KFAC_FIXED = ["--invert_every", "5", "--stats_every", "4",
              "--kfac_momentum", "adam", "--inverse", "explicit"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bin", default="build/bin/autoencoder_mnist")
    p.add_argument("--seeds", default="1,2,3",
                   help="report seeds (the median is over them)")
    p.add_argument("--tuning_seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--kfac_steps", type=int, default=150)
    p.add_argument("--step_ratio", type=int, default=4,
                   help="momentum's steps per K-FAC step in the budgets")
    p.add_argument("--eval_every", type=int, default=25)
    p.add_argument("--eval_examples", type=int, default=5000)
    p.add_argument("--warmup_steps", type=int, default=25,
                   help="momentum's warm-up under the cosine schedule")
    p.add_argument("--precisions", default=None,
                   help="K-FAC's product precisions in the report "
                        "(default: fp32, and bf16 where the CPU has AMX "
                        "or AVX512-BF16)")
    p.add_argument("--extra", default="",
                   help="flags for every run (e.g. '--fake_data --hidden "
                        "64,8' for a quick check of this script)")
    p.add_argument("--tuning_only", action="store_true",
                   help="tune, print the selection as --skip_tuning, stop")
    p.add_argument("--tune", default=None, metavar="OPTIMIZER",
                   help="with --tuning_only: tune this optimizer's grid alone")
    p.add_argument("--skip_tuning", default=None,
                   help="'MOMENTUM_INDEX,KFAC_INDEX': report these grid "
                        "entries instead of tuning")
    p.add_argument("--timeout_s", type=int, default=3600)
    return p.parse_args()


def cpu_has_bf16_products():
    """Whether --kfac_precision bf16 runs here: it needs AMX tiles or
    AVX512-BF16 (kernels/cpu/bf16_gemm.hpp), and every CPU with AMX has
    AVX512-BF16 too; a SYNCFAC_MAX_ISA below avx512 hides both."""
    if os.environ.get("SYNCFAC_MAX_ISA", "avx512") != "avx512":
        return False
    with open("/proc/cpuinfo") as f:
        flags = f.read().split()
    return "avx512_bf16" in flags


class AutoencoderRace:
    """The race's spec (bench/race.py): K-FAC against Nesterov momentum on
    autoencoder_mnist's reconstruction error."""
    name = "autoencoder_race"
    baseline = "momentum"
    grids = {"momentum": MOMENTUM_GRID, "kfac": KFAC_GRID}
    targets = {"train_s": 0.5}
    error_name = "error"

    def __init__(self, args):
        self.args = args
        self.momentum_steps = args.kfac_steps * args.step_ratio

    def flags(self, optimizer, config, seed, phase, precision):
        a = self.args
        steps = self.momentum_steps if optimizer == "momentum" else a.kfac_steps
        split = "validation" if phase == "tuning" else "test"
        cmd = [a.bin, "--steps", str(steps), "--batch_size", str(a.batch),
               "--threads", str(a.threads), "--seed", str(seed),
               "--eval_split", split, "--eval_examples", str(a.eval_examples),
               "--eval_every", str(a.eval_every), "--log_every",
               str(a.eval_every), "--no_progress",
               "--optimizer", optimizer,
               "--learning_rate", str(config["learning_rate"])]
        if optimizer == "momentum":
            cmd += ["--momentum", "0.9", "--nesterov",
                    "--lr_schedule", config["lr_schedule"]]
            if config["lr_schedule"] == "cosine":
                cmd += ["--lr_warmup_steps", str(a.warmup_steps),
                        "--lr_decay_steps", str(steps),
                        "--lr_end_factor", "0.01"]
        else:
            cmd += ["--damping", str(config["damping"]),
                    "--kfac_precision", precision or "fp32"] + KFAC_FIXED
        return cmd + a.extra.split()

    @staticmethod
    def curve(output):
        """[(step, error, train_s, wall_s)] of a run's evaluation lines."""
        return [(int(s), float(e), float(t), float(w))
                for s, e, _, t, w in EVAL_LINE.findall(output)]


def main():
    args = parse_args()
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"autoencoder_race: {args.bin} is not built "
                 "(scripts/build.sh)")
    precisions = (args.precisions.split(",") if args.precisions
                  else ["fp32", "bf16"] if cpu_has_bf16_products() else ["fp32"])
    race = Race(AutoencoderRace(args), Bench("autoencoder_race"),
                args.timeout_s)
    tune_and_report(race, args,
                    [("momentum", None)] + [("kfac", p) for p in precisions])

if __name__ == "__main__":
    main()
