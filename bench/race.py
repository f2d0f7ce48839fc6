"""Two optimizers raced evenly (docs/benchmarks.md, "The protocol", rule 8):
the machinery the races share (bench/autoencoder_race.py,
bench/resnet_race.py); each race is a spec of its own.

The rule both optimizers get:

1. Tuning. Each optimizer runs every configuration of its grid (grids of
   the same size) with the tuning seed, evaluated on a validation split
   held out of the training data; the configuration with the lowest error
   reached within its budget is selected, ties to the earlier one.
2. Report. The selected configurations run with other seeds, evaluated on
   the test split at the same granularity, rounds interleaved
   (bench/protocol.py). For each seed the target is the best test error
   the baseline reached in its budget; every other run's figures are the
   steps, training seconds (evaluations left out) and wall seconds it
   needed to reach that error, as shares of the baseline's. The verdicts
   take the median over the seeds.

A spec has: `name`; `baseline` (the optimizer the others race against);
`grids` ({optimizer: [config, ...]}); `flags(optimizer, config, seed,
phase, variant)` (the command; phase "tuning" or "report"; variant e.g. a
K-FAC precision, or None); `curve(output)` ([(step, error, train_s,
wall_s)] of one run, from what it printed or wrote); `targets`
({"steps" | "train_s" | "wall_s": the largest share of the baseline's
that meets the target}); `error_name` (how its tables call the error).
"""

import statistics

from protocol import Bench


def time_to(points, target):
    """(step, train_s, wall_s) of the first evaluation at or under target."""
    for s, e, t, w in points:
        if e <= target:
            return s, t, w
    return None


def shown(x):
    return "not reached" if x == float("inf") else f"{x:.2f}x"


class Race:
    def __init__(self, spec, bench, timeout_s):
        grid_sizes = {len(g) for g in spec.grids.values()}
        if len(grid_sizes) != 1:
            raise ValueError(f"{spec.name}: the grids must be the same size, "
                             f"got {({k: len(g) for k, g in spec.grids.items()})}")
        self.spec, self.bench, self.timeout_s = spec, bench, timeout_s

    def run(self, program, config, round_no, cmd):
        """Runs one configuration; its record carries the error curve."""
        def figures():
            points = self.spec.curve(self.bench.last_output)
            if not points:
                raise RuntimeError(f"{program}: no evaluation in its run:\n"
                                   f"{self.bench.last_output[-2000:]}")
            return {"curve": points, "final_error": points[-1][1],
                    "best_error": min(p[1] for p in points)}

        return self.bench.run(program, config, round_no, cmd, figures,
                              timeout_s=self.timeout_s)

    def tune(self, optimizer, seed):
        """Every grid entry with `seed` on the validation split; the index
        of the lowest best error (the rule every optimizer gets)."""
        best, rows = None, []
        for i, config in enumerate(self.spec.grids[optimizer]):
            cmd = self.spec.flags(optimizer, config, seed, "tuning", None)
            rec = self.run(f"tune {optimizer}",
                           dict(config, phase="tuning", grid_index=i), 1, cmd)
            rows.append((i, config, rec))
            if best is None or rec["best_error"] < best[1]:
                best = (i, rec["best_error"])
        name = self.spec.error_name
        print(f"\ntuning {optimizer} (seed {seed}, validation split):\n\n"
              f"| # | configuration | steps | best validation {name} "
              "| final | training s |\n|---|---|---|---|---|---|")
        for i, config, rec in rows:
            mark = " (selected)" if i == best[0] else ""
            print(f"| {i} | {config}{mark} | {rec['curve'][-1][0]} "
                  f"| {rec['best_error']:.2f} | {rec['final_error']:.2f} "
                  f"| {rec['curve'][-1][2]:.1f} |")
        return best[0]

    def report(self, selected, seeds, entries):
        """Runs `entries` ([(optimizer, variant)], the baseline's first)
        with every seed on the test split; prints every run's figures
        and the verdicts by the medians over the seeds."""
        spec, runs = self.spec, {}
        def label(optimizer, variant):
            return optimizer if variant is None else f"{optimizer} {variant}"
        for round_no, (optimizer, variant) in Bench.interleaved(len(seeds),
                                                                entries):
            seed = seeds[round_no - 1]
            config = spec.grids[optimizer][selected[optimizer]]
            cmd = spec.flags(optimizer, config, seed, "report", variant)
            runs[(label(optimizer, variant), seed)] = self.run(
                label(optimizer, variant),
                dict(config, phase="report", seed=seed, variant=variant),
                round_no, cmd)
        print("\nselected by validation " + spec.error_name + ": "
              + "; ".join(f"{o} {spec.grids[o][i]}" for o, i in selected.items()))
        print(f"\n| seed | run | steps | best test {spec.error_name} | steps to "
              "target | train s to target | wall s to target | steps vs "
              f"{spec.baseline} | train s vs {spec.baseline} | wall s vs "
              f"{spec.baseline} |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        others = [label(o, v) for o, v in entries if o != spec.baseline]
        shares = {(o, k): [] for o in others for k in ("steps", "train_s", "wall_s")}
        for seed in seeds:
            base = runs[(spec.baseline, seed)]
            target = base["best_error"]
            b_at = time_to(base["curve"], target)
            print(f"| {seed} | {spec.baseline} (target {target:.2f}) | "
                  f"{base['curve'][-1][0]} | {target:.2f} | {b_at[0]} "
                  f"| {b_at[1]:.1f} | {b_at[2]:.1f} | 1.00x | 1.00x | 1.00x |")
            for other in others:
                rec = runs[(other, seed)]
                at = time_to(rec["curve"], target)
                if at is None:
                    print(f"| {seed} | {other} | {rec['curve'][-1][0]} "
                          f"| {rec['best_error']:.2f} | not reached | - | - "
                          "| - | - | - |")
                    for k in ("steps", "train_s", "wall_s"):
                        shares[(other, k)].append(float("inf"))
                    continue
                ratios = [a / b if b > 0 else float("inf")
                          for a, b in zip(at, b_at)]
                for k, r in zip(("steps", "train_s", "wall_s"), ratios):
                    shares[(other, k)].append(r)
                print(f"| {seed} | {other} | {rec['curve'][-1][0]} "
                      f"| {rec['best_error']:.2f} | {at[0]} | {at[1]:.1f} "
                      f"| {at[2]:.1f} | " + " | ".join(shown(r) for r in ratios)
                      + " |")
        print()
        for other in others:
            for k, limit in spec.targets.items():
                xs = shares[(other, k)]
                med = statistics.median(xs)
                verdict = ("no figure (fewer than 3 seeds)" if len(xs) < 3
                           else "met" if med <= limit else "not met")
                print(f"{other}: {k} to {spec.baseline}'s best test "
                      f"{spec.error_name}, median over seeds {shown(med)} "
                      f"{spec.baseline}'s ({', '.join(shown(x) for x in xs)});"
                      f" target {limit}x: {verdict}")


def product_grid(**axes):
    """Every combination of the axes' values, the first axis outermost:
    product_grid(learning_rate=(0.1, 0.2), damping=(0.01,))."""
    grid = [{}]
    for key, values in axes.items():
        grid = [dict(config, **{key: v}) for config in grid for v in values]
    return grid


def tune_and_report(race, args, entries):
    """The whole race: tuning with args.tuning_seed (unless
    args.skip_tuning names the grid entries, 'BASELINE_INDEX,OTHER_INDEX'),
    then (unless args.tuning_only) the report with args.seeds, which must
    not hold the tuning seed."""
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.tuning_seed in seeds:
        raise SystemExit(f"{race.spec.name}: the tuning seed "
                         f"{args.tuning_seed} is among the report seeds "
                         f"{seeds}: report with other seeds")
    optimizers = list(race.spec.grids)
    tuned = args.tune
    if tuned:
        # One optimizer's grid alone, e.g. each grid in a process of its
        # own on a core of its own; --tuning_only then stops after it.
        if tuned not in optimizers:
            raise SystemExit(f"{race.spec.name}: --tune {tuned}: no such "
                             f"optimizer (of {optimizers})")
        if not args.tuning_only:
            raise SystemExit(f"{race.spec.name}: --tune {tuned} tunes one "
                             "grid: the report needs both, add --tuning_only")
        race.tune(tuned, args.tuning_seed)
        return
    if args.skip_tuning:
        selected = dict(zip(optimizers,
                            (int(x) for x in args.skip_tuning.split(","))))
    else:
        selected = {o: race.tune(o, args.tuning_seed) for o in optimizers}
    if args.tuning_only:
        # The selection does not depend on the machine's load (errors
        # within a step budget), the report's seconds do: tuning may run
        # beside other work, the report later on a quiet machine.
        print("\nselected: --skip_tuning "
              + ",".join(str(selected[o]) for o in optimizers))
        return
    race.report(selected, seeds, entries)
