#!/usr/bin/env python3
"""ResNet-20 on Fashion-MNIST: K-FAC against momentum SGD, evenly run
(docs/benchmarks.md, "ResNet-20: K-FAC against momentum"; issue 35 item 4).

The rule is bench/race.py's: grids of the same size, each configuration
trained for the same number of epochs (--epochs) with the tuning seed on
a validation split, the lowest validation error selected; the two
selected configurations then run with seeds 1-3 on the test split,
evaluated at the same granularity (every --eval_every global steps),
rounds interleaved. The target (issue 35): K-FAC reaches momentum's best
test accuracy within momentum's budget in at most 0.5x momentum's epochs
(its global steps: both train with the same batch and replicas) and 0.8x
its wall seconds, median over the seeds.

The validation split is the last --validation_examples of the 60,000
training images, held out of training: this script writes them as a .npz
file (--data: x_train, y_train the first images, x_test, y_test the held
out ones) from the Fashion-MNIST IDX files, with Python's standard
library. The report trains on all 60,000 and evaluates on the 10,000 test
images (--data_dir). Error is 100 x (1 - accuracy), in percent.

Momentum SGD: Nesterov, momentum 0.9, the L2 penalty 5e-4 of the CIFAR
ResNet recipes, a linear warm-up of --warmup_steps, then a cosine or a
step schedule (x0.1 at 50 % and 75 % of the steps); the grid varies the
rate and the schedule. K-FAC: the same warm-up and cosine schedule and L2
penalty, its inverses every 10 steps; the grid varies the rate and the
damping. Eight configurations each; each grid's rates span 8x or more.

Two runtimes (--runtime): "single", convnet_mnist_single with its
chief, --workers workers and one PS shard as actors in one process, and
"cluster", a loopback cluster of one process per task (chief, --workers
workers, one PS shard) through syncfac-launch and
convnet_mnist_distributed. R = --workers; the chief writes --metrics,
whose evaluation records give the curve (training seconds leave each
evaluation's own time out: an evaluation record's wall seconds less the
training record's of the same step).

  resnet_race.py --bin_dir build/bin [--runtime single|cluster]
                 [--epochs 3] [--workers 1] [--threads 2] [--seeds 1,2,3]

Every run is one JSON line in bench/results/resnet_race.jsonl (the
protocol's record) with its whole curve.
"""

import argparse
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from protocol import Bench  # noqa: E402
from race import Race, product_grid, tune_and_report  # noqa: E402

MODEL = "examples/models/resnet20.json"
TRAIN_IMAGES = 60000

MOMENTUM_GRID = product_grid(learning_rate=(0.025, 0.05, 0.1, 0.2),
                             lr_schedule=("cosine", "step"))
KFAC_GRID = product_grid(learning_rate=(0.003, 0.01, 0.03, 0.05),
                         damping=(0.001, 0.01))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bin_dir", default="build/bin")
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--runtime", choices=("single", "cluster"), default="single")
    p.add_argument("--epochs", type=float, default=3.0,
                   help="each run's budget, the same for both optimizers")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--workers", type=int, default=1,
                   help="workers (R = workers), each --batch per step")
    p.add_argument("--threads", type=int, default=2,
                   help="compute threads per process")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--tuning_seed", type=int, default=0)
    p.add_argument("--eval_every", type=int, default=100,
                   help="global steps between evaluations (both optimizers)")
    p.add_argument("--validation_examples", type=int, default=5000)
    p.add_argument("--warmup_steps", type=int, default=100)
    p.add_argument("--tuning_only", action="store_true",
                   help="tune, print the selection as --skip_tuning, stop")
    p.add_argument("--tune", default=None, metavar="OPTIMIZER",
                   help="with --tuning_only: tune this optimizer's grid alone")
    p.add_argument("--skip_tuning", default=None,
                   help="'MOMENTUM_INDEX,KFAC_INDEX': report these grid "
                        "entries instead of tuning")
    p.add_argument("--extra", default="", help="flags for every run")
    p.add_argument("--timeout_s", type=int, default=7200)
    args = p.parse_args()
    for name in ("batch", "workers", "threads", "eval_every",
                 "validation_examples"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.epochs <= 0:
        p.error(f"--epochs must be positive, got {args.epochs}")
    if args.validation_examples >= TRAIN_IMAGES:
        p.error(f"--validation_examples {args.validation_examples} leaves no "
                f"training images (of {TRAIN_IMAGES})")
    return args


def read_idx(path, magic):
    """The payload and dimensions of an IDX file (gzipped or not)."""
    for candidate in (path, path + ".gz"):
        if os.path.exists(candidate):
            opener = gzip.open if candidate.endswith(".gz") else open
            with opener(candidate, "rb") as f:
                data = f.read()
            break
    else:
        sys.exit(f"resnet_race: {path}[.gz] not found (--data_dir; "
                 "apt-get install dataset-fashion-mnist)")
    got, = struct.unpack(">I", data[:4])
    if got != magic:
        sys.exit(f"resnet_race: {path}: magic {got:#x}, expected {magic:#x}")
    ndim = magic & 0xff
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    return data[4 + 4 * ndim:], dims


def npy(payload, shape):
    """A uint8 array as a .npy file (format 1.0)."""
    header = ("{'descr': '|u1', 'fortran_order': False, 'shape': ("
              + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
              + "), }")
    pad = 64 - (10 + len(header) + 1) % 64
    header += " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload


def write_validation_npz(data_dir, held_out, path):
    """Fashion-MNIST's training images as a training split and the last
    `held_out` of them as the 'test' split that --data reads."""
    images, (n, h, w) = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte"), 0x803)
    labels, (m,) = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte"), 0x801)
    if n != m or n != TRAIN_IMAGES:
        sys.exit(f"resnet_race: {data_dir}: {n} training images and {m} "
                 f"labels, expected {TRAIN_IMAGES} of each")
    keep, px = n - held_out, h * w
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("x_train.npy", npy(images[:keep * px], (keep, h, w)))
        z.writestr("y_train.npy", npy(labels[:keep], (keep,)))
        z.writestr("x_test.npy", npy(images[keep * px:], (held_out, h, w)))
        z.writestr("y_test.npy", npy(labels[keep:], (held_out,)))


def metrics_curve(path):
    """[(step, error %, train_s, wall_s)] of a --metrics file."""
    points, last_train_wall, eval_s = [], 0.0, 0.0
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "test_accuracy" in rec:
                eval_s += max(0.0, rec["wall_s"] - last_train_wall)
                points.append((rec["step"], 100.0 * (1.0 - rec["test_accuracy"]),
                               rec["wall_s"] - eval_s, rec["wall_s"]))
            elif "loss" in rec:
                last_train_wall = rec["wall_s"]
    return points


def free_ports(n):
    return subprocess.run([sys.executable, "scripts/free_ports.py", str(n)],
                          capture_output=True, text=True, check=True).stdout.split()


class ResnetRace:
    """The race's spec (bench/race.py)."""
    name = "resnet_race"
    baseline = "momentum"
    grids = {"momentum": MOMENTUM_GRID, "kfac": KFAC_GRID}
    targets = {"steps": 0.5, "wall_s": 0.8}
    error_name = "error %"

    def __init__(self, args, scratch):
        self.args, self.scratch = args, scratch
        self.validation_npz = os.path.join(scratch, "validation.npz")
        self.runs = 0

    def steps(self, phase):
        a = self.args
        train = TRAIN_IMAGES - (a.validation_examples if phase == "tuning" else 0)
        # A multiple of --eval_every: the last evaluation follows a
        # training record of its step, so its own time is known.
        evals = round(a.epochs * train / (a.batch * a.workers) / a.eval_every)
        return max(1, evals) * a.eval_every

    def flags(self, optimizer, config, seed, phase, variant):
        a = self.args
        steps = self.steps(phase)
        self.runs += 1
        self.metrics = os.path.join(self.scratch, f"metrics_{self.runs}.jsonl")
        training = [
            "--model_file", MODEL, "--steps", str(steps),
            "--batch_size", str(a.batch), "--threads", str(a.threads),
            "--seed", str(seed), "--eval_every", str(a.eval_every),
            "--log_every", str(a.eval_every), "--no_progress",
            "--metrics", self.metrics, "--optimizer", optimizer,
            "--learning_rate", str(config["learning_rate"]),
            "--l2_penalty", "0.0005",
            "--lr_warmup_steps", str(a.warmup_steps)]
        schedule = config.get("lr_schedule", "cosine")
        if schedule == "cosine":
            training += ["--lr_schedule", "cosine", "--lr_decay_steps",
                         str(steps), "--lr_end_factor", "0"]
        else:
            training += ["--lr_schedule", "step", "--lr_boundaries",
                         f"{steps // 2},{3 * steps // 4}", "--lr_decay_rate", "0.1"]
        if optimizer == "momentum":
            training += ["--momentum", "0.9", "--nesterov"]
        else:
            training += ["--damping", str(config["damping"]), "--invert_every", "10"]
        training += (["--data", self.validation_npz] if phase == "tuning"
                     else ["--data_dir", a.data_dir])
        training += a.extra.split()
        if a.runtime == "single":
            return [os.path.join(a.bin_dir, "convnet_mnist_single"),
                    "--worker_replicas", str(a.workers)] + training
        cluster = os.path.join(self.scratch, f"cluster_{self.runs}.json")
        ports = [f"127.0.0.1:{p}" for p in free_ports(a.workers + 2)]
        with open(cluster, "w") as f:
            json.dump({"cluster": {"chief": ports[:1], "ps": ports[1:2],
                                   "worker": ports[2:]}}, f)
        return [os.path.join(a.bin_dir, "syncfac-launch"), "--cluster", cluster,
                "--program", os.path.join(a.bin_dir, "convnet_mnist_distributed"),
                "--max_wall_s", str(a.timeout_s), "--"] + training

    def curve(self, output):
        return metrics_curve(self.metrics)


def main():
    args = parse_args()
    programs = (["convnet_mnist_single"] if args.runtime == "single"
                else ["syncfac-launch", "convnet_mnist_distributed"])
    for program in programs:
        if not os.access(os.path.join(args.bin_dir, program), os.X_OK):
            sys.exit(f"resnet_race: {args.bin_dir}/{program} is not built "
                     "(scripts/build.sh)")
    with tempfile.TemporaryDirectory() as scratch:
        spec = ResnetRace(args, scratch)
        if not args.skip_tuning:
            write_validation_npz(args.data_dir, args.validation_examples,
                                 spec.validation_npz)
        race = Race(spec, Bench("resnet_race"), args.timeout_s)
        tune_and_report(race, args, [("momentum", None), ("kfac", None)])

if __name__ == "__main__":
    main()
