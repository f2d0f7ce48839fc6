#!/usr/bin/env python3
"""Spread of undisturbed runs: the tolerance of the fault tests.

With several workers a run is not deterministic (which batches each step
averages depends on timing), so a fault test on real data can only hold
a disturbed run's test accuracy near an undisturbed one's. This measures
how near undisturbed runs of the same seed and flags are to each other
and to the same topology in one process: per topology of
tests/examples/faults.cpp, the in-process run (convnet_mnist_single, whose
accuracy the tests compare with) and --runs loopback clusters
(syncfac-launch), each on Fashion-MNIST. The tests' tolerance is a margin
above the largest distance measured here (docs/design.md §6).

  bench/accuracy_spread.py [--runs N] [--bin DIR] [--only NAME]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Must stay the flags of tests/examples/faults.cpp's `common`.
COMMON = ["--batch_size", "32", "--threads", "1", "--seed", "3",
          "--moving_average_decay", "0.9",
          "--no_progress", "--init", "glorot", "--log_every", "10"]


def topology(workers, ps, steps, *extra, **more_jobs):
    """(jobs, flags) of a run: the chief, `workers` workers and `ps` PS
    shards (and `more_jobs`), R = 2, `steps` global steps, then `extra`."""
    jobs = {"chief": 1, "worker": workers, "ps": ps, **more_jobs}
    return jobs, ["--steps", str(steps), "--replicas_to_aggregate", "2", *extra]


# name: (jobs, flags); the same topologies and flags as the tests.
TOPOLOGIES = {
    "3 workers, R 2, 1 PS, 150 steps": topology(3, 1, 150),
    "2 workers, R 2, 1 PS, 150 steps": topology(2, 1, 150),
    "2 workers, R 2, 1 PS, 300 steps": topology(2, 1, 300),
    "2 workers, R 2, 2 PS, 150 steps": topology(2, 2, 150),
    "K-FAC, 2 workers, R 2, 1 PS, covariance, inverse, 1500 steps": topology(
        2, 1, 1500, "--optimizer", "kfac", "--learning_rate", "0.0003",
        covariance=1, inverse=1),
}


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from free_ports import free_ports  # noqa: E402  (below the ephemeral range)


def accuracy(cmd, summary):
    res = subprocess.run(cmd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0:
        print(res.stdout[-3000:])
        sys.exit("accuracy_spread: %s exited with %d"
                 % (os.path.basename(cmd[0]), res.returncode))
    with open(summary) as f:
        return json.load(f)["test_accuracy"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--bin", default=os.environ.get("SYNCFAC_BIN_DIR",
                                                    "build/bin"))
    ap.add_argument("--only", help="one topology (a substring of its name)")
    args = ap.parse_args()
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        sys.exit("accuracy_spread: Debian's dataset-fashion-mnist is not "
                 "installed (scripts/install-deps.sh installs it)")
    print("| topology | in process | clusters (%d runs) | spread | largest "
          "distance to in process |" % args.runs)
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (jobs, flags) in TOPOLOGIES.items():
            if args.only and args.only not in name:
                continue
            workers = str(jobs["worker"])
            shards = str(jobs["ps"])
            summary = os.path.join(tmp, "local.json")
            local = accuracy([os.path.join(args.bin, "convnet_mnist_single")]
                             + COMMON + flags + ["--worker_replicas", workers,
                                                 "--ps_tasks", shards,
                                                 "--summary", summary],
                             summary)
            accs = []
            started = time.monotonic()
            for i in range(args.runs):
                cluster = os.path.join(tmp, "cluster.json")
                with open(cluster, "w") as f:
                    json.dump({"cluster": {
                        job: ["127.0.0.1:%d" % p for p in free_ports(n)]
                        for job, n in jobs.items()}}, f)
                summary = os.path.join(tmp, "cluster%d.json" % i)
                accs.append(accuracy(
                    [os.path.join(args.bin, "syncfac-launch"), "--cluster",
                     cluster, "--program",
                     os.path.join(args.bin, "convnet_mnist_distributed"),
                     "--max_wall_s", "600", "--"] + COMMON + flags
                    + ["--connect_timeout_ms", "60000", "--summary", summary],
                    summary))
            print("| %s | %.4f | %s (mean %.4f) | %.4f | %.4f |" % (
                name, local, ", ".join("%.4f" % a for a in accs),
                statistics.mean(accs), max(accs) - min(accs),
                max(abs(a - local) for a in accs)), flush=True)
            print("  (%.0f s for the clusters)"
                  % (time.monotonic() - started), file=sys.stderr)


if __name__ == "__main__":
    main()
