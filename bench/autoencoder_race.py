#!/usr/bin/env python3
"""The deep autoencoder race, evenly run (docs/benchmarks.md, "The
autoencoder race, evenly run"; issue 37 item 6).

Both optimizers get the same tuning budget and the same rule:

1. Tuning. Each optimizer runs the configurations of its grid (the same
   number for both: GRID_SIZE) with the tuning seed, evaluated on a
   validation split (the last EVAL_EXAMPLES training images, held out of
   training: autoencoder_mnist --eval_split validation) every EVAL_EVERY
   steps. The configuration with the lowest validation error reached
   within its step budget is selected; ties go to the earlier one.
   Momentum SGD's grid has Nesterov's momentum and a schedule (constant
   or cosine over the run, with a warm-up); K-FAC's varies the learning
   rate and the damping.
2. Report. The two selected configurations run with other seeds, each
   evaluated on the test split (the first EVAL_EXAMPLES test images:
   --eval_split test) at the same granularity (every EVAL_EVERY steps for
   both), rounds interleaved (bench/protocol.py). K-FAC runs once per
   product precision (fp32, and bf16 where the CPU has AMX tiles, which
   --kfac_precision bf16 needs).

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
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from protocol import Bench  # noqa: E402

EVAL_LINE = re.compile(r"global_step: (\d+) \| reconstruction_error: (\S+) "
                       r"\((\d+) examples\) \| train_s: (\S+) \| wall_s: (\S+)")

# The grids: GRID_SIZE configurations each, so that neither optimizer is
# tuned more than the other. Momentum's steps are K-FAC's times
# STEP_RATIO: K-FAC's steps cost several momentum steps here, and
# momentum's best error within its longer budget is the target.
# Each grid's rates reach below the rate its optimizer selected on a first,
# narrower run (momentum 0.003, K-FAC 0.003: both at the low edge), so
# that neither selection sits at an edge only because the grid stopped.
MOMENTUM_GRID = [
    {"learning_rate": lr, "lr_schedule": schedule}
    for lr in (0.0015, 0.003, 0.006, 0.01) for schedule in ("constant", "cosine")
]
KFAC_GRID = [
    {"learning_rate": lr, "damping": damping}
    for lr in (0.001, 0.003, 0.01, 0.03) for damping in (0.01, 0.03)
]
GRID_SIZE = len(MOMENTUM_GRID)
assert len(KFAC_GRID) == GRID_SIZE, "the grids must be the same size"

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
                        "(default: fp32, and bf16 where the CPU has AMX)")
    p.add_argument("--extra", default="",
                   help="flags for every run (e.g. '--fake_data --hidden "
                        "64,8' for a quick check of this script)")
    p.add_argument("--skip_tuning", default=None,
                   help="'MOMENTUM_INDEX,KFAC_INDEX': report these grid "
                        "entries instead of tuning")
    p.add_argument("--timeout_s", type=int, default=3600)
    return p.parse_args()


def cpu_has_bf16_products():
    """Whether --kfac_precision bf16 runs here: it needs AMX tiles."""
    with open("/proc/cpuinfo") as f:
        flags = f.read().split()
    return "amx_bf16" in flags and "amx_tile" in flags


def curve(text):
    """[(step, error, train_s, wall_s)] of a run's evaluation lines."""
    return [(int(s), float(e), float(t), float(w))
            for s, e, _, t, w in EVAL_LINE.findall(text)]


class Race:
    def __init__(self, args, bench):
        self.args, self.bench = args, bench
        self.momentum_steps = args.kfac_steps * args.step_ratio

    def flags(self, optimizer, config, seed, split, precision="fp32"):
        a = self.args
        steps = self.momentum_steps if optimizer == "momentum" else a.kfac_steps
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
                    "--kfac_precision", precision] + KFAC_FIXED
        return cmd + a.extra.split()

    def run(self, program, config, round_no, cmd):
        """Runs one configuration; its record carries the error curve."""
        def figures():
            points = curve(self.bench.last_output)
            if not points:
                raise RuntimeError(f"{program}: no evaluation line in its "
                                   f"output:\n{self.bench.last_output[-2000:]}")
            return {"curve": points, "final_error": points[-1][1],
                    "best_error": min(p[1] for p in points)}

        return self.bench.run(program, config, round_no, cmd, figures,
                              timeout_s=self.args.timeout_s)

    def tune(self, optimizer, grid):
        """Every grid entry with the tuning seed on the validation split;
        the index of the lowest best error (the rule both get)."""
        best = None
        rows = []
        for i, config in enumerate(grid):
            cmd = self.flags(optimizer, config, self.args.tuning_seed,
                             "validation")
            rec = self.run(f"tune {optimizer}",
                           dict(config, phase="tuning", grid_index=i),
                           1, cmd)
            rows.append((i, config, rec))
            if best is None or rec["best_error"] < best[1]:
                best = (i, rec["best_error"])
        print(f"\ntuning {optimizer} (seed {self.args.tuning_seed}, "
              f"validation split):\n\n| # | configuration | steps "
              "| best validation error | final | training s |\n"
              "|---|---|---|---|---|---|")
        for i, config, rec in rows:
            mark = " (selected)" if i == best[0] else ""
            print(f"| {i} | {config}{mark} | {rec['curve'][-1][0]} "
                  f"| {rec['best_error']:.2f} | {rec['final_error']:.2f} "
                  f"| {rec['curve'][-1][2]:.1f} |")
        return best[0]


def time_to(points, target):
    """(step, train_s, wall_s) of the first evaluation at or under target."""
    for s, e, t, w in points:
        if e <= target:
            return s, t, w
    return None


def report(race, m_index, k_index, seeds, precisions):
    bench = race.bench
    entries = [("momentum", None)] + [("kfac", p) for p in precisions]
    runs = {}
    for round_no, (optimizer, precision) in Bench.interleaved(len(seeds),
                                                              entries):
        seed = seeds[round_no - 1]
        grid, index = ((MOMENTUM_GRID, m_index) if optimizer == "momentum"
                       else (KFAC_GRID, k_index))
        config = grid[index]
        cmd = race.flags(optimizer, config, seed, "test", precision or "fp32")
        name = optimizer if precision is None else f"kfac {precision}"
        rec = race.run(name, dict(config, phase="report", seed=seed,
                                  precision=precision), round_no, cmd)
        runs[(name, seed)] = rec
    print(f"\nselected by validation error (seed {race.args.tuning_seed}): "
          f"momentum {MOMENTUM_GRID[m_index]} (Nesterov), "
          f"K-FAC {KFAC_GRID[k_index]}")
    print("\n| seed | run | steps | best test error | steps to target "
          "| train s to target | wall s to target | train s vs momentum "
          "| wall s vs momentum |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = {p: [] for p in precisions}
    for seed in seeds:
        m = runs[("momentum", seed)]
        target = m["best_error"]
        m_at = time_to(m["curve"], target)
        print(f"| {seed} | momentum (target {target:.2f}) | "
              f"{m['curve'][-1][0]} | {target:.2f} | {m_at[0]} "
              f"| {m_at[1]:.1f} | {m_at[2]:.1f} | 1.00x | 1.00x |")
        for p in precisions:
            k = runs[(f"kfac {p}", seed)]
            k_at = time_to(k["curve"], target)
            if k_at is None:
                print(f"| {seed} | K-FAC {p} | {k['curve'][-1][0]} "
                      f"| {k['best_error']:.2f} | not reached | - | - | - | - |")
                ratios[p].append(float("inf"))
                continue
            train_ratio, wall_ratio = k_at[1] / m_at[1], k_at[2] / m_at[2]
            ratios[p].append(train_ratio)
            print(f"| {seed} | K-FAC {p} | {k['curve'][-1][0]} "
                  f"| {k['best_error']:.2f} | {k_at[0]} | {k_at[1]:.1f} "
                  f"| {k_at[2]:.1f} | {train_ratio:.2f}x | {wall_ratio:.2f}x |")
    print()
    for p, xs in ratios.items():
        med = statistics.median(xs)
        enough = len(xs) >= 3
        verdict = ("no figure (fewer than 3 seeds)" if not enough
                   else "met" if med <= 0.5 else "not met")
        def shown(x):
            return "not reached" if x == float("inf") else f"{x:.2f}x"
        print(f"K-FAC {p}: training seconds to momentum's best error, "
              f"median over seeds {shown(med)} momentum's "
              f"({', '.join(shown(x) for x in xs)}); target 0.5x: "
              f"{verdict}")


def main():
    args = parse_args()
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"autoencoder_race: {args.bin} is not built "
                 "(scripts/build.sh)")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.tuning_seed in seeds:
        sys.exit(f"autoencoder_race: the tuning seed {args.tuning_seed} is "
                 f"among the report seeds {seeds}: report with other seeds")
    precisions = (args.precisions.split(",") if args.precisions
                  else ["fp32", "bf16"] if cpu_has_bf16_products() else ["fp32"])
    bench = Bench("autoencoder_race")
    race = Race(args, bench)
    if args.skip_tuning:
        m_index, k_index = (int(x) for x in args.skip_tuning.split(","))
    else:
        m_index = race.tune("momentum", MOMENTUM_GRID)
        k_index = race.tune("kfac", KFAC_GRID)
    report(race, m_index, k_index, seeds, precisions)


if __name__ == "__main__":
    main()
