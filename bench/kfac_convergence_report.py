#!/usr/bin/env python3
"""Reads the runs of bench/run_kfac_convergence.sh (metrics JSON lines and
summaries in OUT), prints steps and seconds to the target test accuracy
and the per-step cost, and plots accuracy against steps and seconds into
OUT/kfac_convergence.png (when matplotlib is there).

    kfac_convergence_report.py OUT TARGET
"""
import glob
import json
import os
import sys


def load(path):
    """(name, [(step, wall_s, test_accuracy)], summary) of one run.

    Seconds are those of the training log line at the evaluated step: the
    time the step was reached, not when its evaluation finished."""
    name = os.path.basename(path)[:-len(".jsonl")]
    trained, evals = {}, []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "test_accuracy" in rec:
                evals.append((rec["step"], rec["test_accuracy"]))
            elif "loss" in rec:
                trained[rec["step"]] = rec["wall_s"]
    points = [(s, trained.get(s), a) for s, a in evals if s in trained]
    with open(path[:-len(".jsonl")] + ".json") as f:
        summary = json.load(f)
    return name, points, summary


def first_reaching(points, target):
    for step, wall, acc in points:
        if acc >= target:
            return step, wall
    return None, None


def main():
    out, target = sys.argv[1], float(sys.argv[2])
    runs = [load(p) for p in sorted(glob.glob(os.path.join(out, "*.jsonl")))]
    first_order = [r for r in runs if not r[0].startswith("kfac")]
    rows = []
    for name, points, summary in runs:
        step, wall = first_reaching(points, target)
        best = max((a for _, _, a in points), default=float("nan"))
        rows.append((name, step, wall, best, summary.get("examples_per_s", 0)))
    reached = [r for r in rows if r[1] is not None
               and not r[0].startswith("kfac")]
    base = min(reached, key=lambda r: r[2]) if reached else None
    sgd = [r for r in rows if r[0].startswith("momentum")]
    sgd_rate = max((r[4] for r in sgd), default=0)
    print(f"\ntarget test accuracy {target:.2f}; baseline: "
          + (f"{base[0]} ({base[1]} steps, {base[2]:.1f} s)" if base
             else "no first-order run reached it"))
    print("| run | steps to target | seconds to target | steps vs best "
          "first-order | seconds vs best first-order | best accuracy | "
          "examples/s | per-step cost vs momentum SGD |")
    print("|---|---|---|---|---|---|---|---|")
    for name, step, wall, best, rate in rows:
        ratio_s = ratio_t = "-"
        if base and step is not None:
            ratio_s = f"{step / base[1]:.2f}x"
            ratio_t = f"{wall / base[2]:.2f}x"
        cost = f"{sgd_rate / rate:.2f}x" if rate > 0 and sgd_rate > 0 else "-"
        print(f"| {name} | {step if step is not None else 'not reached'} | "
              + (f"{wall:.1f}" if wall is not None else "-")
              + f" | {ratio_s} | {ratio_t} | {best:.4f} | {rate:.0f} | {cost} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: apt-get install python3-matplotlib for the plot)")
        return
    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(13, 5))
    for name, points, _ in runs:
        style = "-" if name.startswith("kfac") else "--"
        by_step.plot([p[0] for p in points], [p[2] for p in points], style,
                     label=name)
        by_time.plot([p[1] for p in points], [p[2] for p in points], style,
                     label=name)
    for ax, xlabel in ((by_step, "global step"), (by_time, "seconds of training")):
        ax.axhline(target, color="gray", linewidth=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test accuracy (Fashion-MNIST, 10,000 images)")
        ax.set_ylim(0.7, 0.93)
        ax.grid(alpha=0.3)
    by_step.legend(fontsize=8)
    fig.suptitle("syncfac ConvNet, batch 128: K-FAC strategies vs momentum "
                 "SGD and Adam")
    fig.tight_layout()
    png = os.path.join(out, "kfac_convergence.png")
    fig.savefig(png, dpi=110)
    print(f"plot: {png}")


if __name__ == "__main__":
    main()
