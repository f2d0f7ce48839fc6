#!/usr/bin/env python3
"""Hundreds of workers over real sockets (docs/benchmarks.md, "Hundreds of
workers over sockets").

N workers as P worker processes of K = N / P workers each
(--workers_per_task K), every worker a remote peer of the chief and the PS
shards (one process each) over loopback TCP; the ConvNet's parameters
(14,682, 58,728 bytes) and the delay device's random gradients
(--device bench_delay:MS:random), so that every push and pull carries the
real payload. Per N: global steps/s, bytes on the wire per global step,
and the chief's and ps:0's CPU per global step.

  scale_sockets.py --bin DIR [--out DIR] [--workers 32,64,128,256]
                   [--procs 8] [--rounds 2] [--steps 20,60] [--delay_ms 2]
                   [--ps 2] [--shared_lo] [--extra FLAGS]

Bytes on the wire come from the kernel, not from the program's payload
counters: the script runs itself again inside a network namespace of its
own (unshare -n), whose loopback carries this benchmark's traffic alone,
and reads lo's transmitted bytes and packets (/proc/net/dev) around each
run: whole packets, TCP/IP headers included. (/proc/PID/io's wchar is of
no use here: CAF sends with send(2), which it does not count.) With
--shared_lo (no unshare) the host's lo is read instead and other programs'
loopback traffic counts too.

Per-step figures leave start-up and the end out: each round runs N twice,
S1 and S2 global steps (--steps S1,S2), and a figure per step is the
difference of the two runs over S2 - S1 steps; lo's bytes and the chief's
and ps:0's CPU (wait4's rusage of each process) alike. Global steps/s is
the long run's own (its summary, after S1 warm-up steps). Every pair of
runs is one JSON line in bench/results/scale_sockets.jsonl (commit, CPU
model, load average before and after: bench/protocol.py); rounds go
through the Ns in alternating order (Bench.interleaved).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import protocol  # noqa: E402
from scale import cpu_s, loopback_cluster, run_cluster  # noqa: E402

NETNS_ENV = "SYNCFAC_SCALE_SOCKETS_NETNS"
BATCH = 4
PARAMETER_BYTES = 58728  # the ConvNet's 14,682 float32 parameters


def enter_own_network():
    """Runs this script again in a network namespace of its own with lo up;
    returns only inside it."""
    if os.environ.get(NETNS_ENV) == "1":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        return
    env = dict(os.environ, **{NETNS_ENV: "1"})
    argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    # Without root, a user namespace of its own maps this user to root.
    unshare = ["unshare", "-n" if os.geteuid() == 0 else "-rn", "--"]
    try:
        sys.exit(subprocess.run(unshare + argv, env=env).returncode)
    except FileNotFoundError:
        sys.exit("scale_sockets: no unshare(1); use --shared_lo")


def lo_counters():
    """(bytes, packets) lo transmitted so far."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                fields = rest.split()
                return int(fields[8]), int(fields[9])
    sys.exit("scale_sockets: no lo in /proc/net/dev")


def one_run(args, n, steps, name):
    """chief, args.ps shards and args.procs worker processes of n / procs
    workers each; returns the run's figures."""
    k = n // args.procs
    cluster = loopback_cluster([("chief", 1), ("ps", args.ps),
                                ("worker", args.procs)])
    cfile = os.path.join(args.out, name + "_cluster.json")
    with open(cfile, "w") as f:
        json.dump(cluster, f)
    summary = os.path.join(args.out, name + ".json")
    flags = ["--fake_data", "--model", "convnet", "--optimizer", "sgd",
             "--learning_rate", "0.01", "--batch_size", str(BATCH),
             "--no_final_eval", "--no_progress", "--log_every", "100000",
             "--threads", "1", "--seed", "1",
             "--fake_train_size", str(max(2048, BATCH * n * 2)),
             "--fake_test_size", "100",
             "--device", f"bench_delay:{args.delay_ms}:random",
             "--workers_per_task", str(k), "--steps", str(steps),
             "--warmup", str(args.short_steps),
             "--step_timeout_ms", "600000", "--connect_timeout_ms", "300000",
             "--summary", summary] + args.extra.split()
    prog = os.path.join(args.bin, "convnet_mnist_distributed")
    tasks = [("chief", 0)] + [("ps", i) for i in range(args.ps)] + [
        ("worker", i) for i in range(args.procs)]
    lo0 = lo_counters()
    t0 = time.monotonic()
    usage, peak = run_cluster(prog, cfile, tasks, flags, args.out, name,
                              args.timeout_s)
    wall = time.monotonic() - t0
    lo1 = lo_counters()
    with open(summary) as f:
        s = json.load(f)
    workers = [("worker", i) for i in range(args.procs)]
    return {
        "global_steps": s["global_step"], "wall_s": wall,
        "steps_per_s": s["examples_per_s"] / (BATCH * n),
        "lo_bytes": lo1[0] - lo0[0], "lo_packets": lo1[1] - lo0[1],
        "chief_cpu_s": cpu_s(usage[("chief", 0)]),
        "ps0_cpu_s": cpu_s(usage[("ps", 0)]),
        "worker_proc_cpu_s": statistics.mean(cpu_s(usage[w])
                                             for w in workers),
        "worker_proc_peak_rss_mib": statistics.mean(peak[w] for w in workers),
        "payload_bytes_per_step": sum(
            s["transfers"][who]["bytes_per_global_step"]
            for who in ("sent_by_workers", "sent_by_shards", "sent_by_chief")),
        "messages_per_step": sum(
            s["transfers"][who]["messages_per_global_step"]
            for who in ("sent_by_workers", "sent_by_shards", "sent_by_chief")),
        "ratio_to_minimum": s["transfers"]["ratio_to_minimum"],
        "token_wait_ms": s["transfers"].get("token_wait_ms_per_worker_step",
                                            0)}


def pair(args, n, round_no):
    """A short and a long run of n workers; the per-step figures between."""
    short = one_run(args, n, args.short_steps, f"n{n}_r{round_no}_short")
    long = one_run(args, n, args.long_steps, f"n{n}_r{round_no}_long")
    steps = long["global_steps"] - short["global_steps"]
    per_step = lambda key: (long[key] - short[key]) / steps  # noqa: E731
    return {
        "n": n, "procs": args.procs, "workers_per_task": n // args.procs,
        "ps": args.ps, "delay_ms": args.delay_ms,
        "steps": [short["global_steps"], long["global_steps"]],
        "steps_per_s": long["steps_per_s"],
        "wire_bytes_per_step": per_step("lo_bytes"),
        "wire_packets_per_step": per_step("lo_packets"),
        "chief_cpu_ms_per_step": 1000 * per_step("chief_cpu_s"),
        "ps0_cpu_ms_per_step": 1000 * per_step("ps0_cpu_s"),
        "worker_proc_cpu_ms_per_step": 1000 * per_step("worker_proc_cpu_s"),
        "worker_proc_peak_rss_mib": long["worker_proc_peak_rss_mib"],
        "payload_bytes_per_step": long["payload_bytes_per_step"],
        "messages_per_step": long["messages_per_step"],
        "min_bytes_per_step": 2 * n * PARAMETER_BYTES,
        "ratio_to_minimum": long["ratio_to_minimum"],
        "token_wait_ms": long["token_wait_ms"],
        "wall_s": short["wall_s"] + long["wall_s"],
        "network": "shared lo" if args.shared_lo else "own namespace's lo"}


def fmt(xs, f):
    return protocol.median_range(xs, f.format)


def print_table(rows, facts, rounds, args):
    print(f"\n{facts['cpu']}, {facts['nproc']} cores; {args.procs} worker "
          f"processes, {args.ps} PS shards, ConvNet ({PARAMETER_BYTES} "
          f"bytes), delay {args.delay_ms} ms, R = N; per step from "
          f"{args.short_steps} and {args.long_steps} steps; median (min–max) "
          f"of {rounds}")
    print("| N | K per process | global steps/s | wire MB per step | wire vs "
          "2 N params | chief CPU ms/step | ps:0 CPU ms/step | worker "
          "process CPU ms/step | messages per step | load before |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    by_n = {}
    for r in rows:
        by_n.setdefault(r["n"], []).append(r)
    for n, rs in sorted(by_n.items()):
        def col(key, f):
            return fmt([r[key] for r in rs], f)
        ratio = [r["wire_bytes_per_step"] / r["min_bytes_per_step"]
                 for r in rs]
        loads = ", ".join(f"{r['load_before'][0]:.1f}" for r in rs)
        print(f"| {n} | {n // args.procs} | {col('steps_per_s', '{:.1f}')} | "
              f"{fmt([r['wire_bytes_per_step'] / 1e6 for r in rs], '{:.2f}')}"
              f" | {fmt(ratio, '{:.3f}x')} | "
              f"{col('chief_cpu_ms_per_step', '{:.2f}')} | "
              f"{col('ps0_cpu_ms_per_step', '{:.2f}')} | "
              f"{col('worker_proc_cpu_ms_per_step', '{:.2f}')} | "
              f"{statistics.median(r['messages_per_step'] for r in rs):.0f}"
              f" | {loads} |")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bin", default="build/bin")
    p.add_argument("--out", default="bench/results/scale_sockets")
    p.add_argument("--workers", default="32,64,128,256")
    p.add_argument("--procs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", default="20,60")
    p.add_argument("--delay_ms", type=float, default=2)
    p.add_argument("--ps", type=int, default=2)
    p.add_argument("--timeout_s", type=int, default=1200)
    p.add_argument("--shared_lo", action="store_true")
    p.add_argument("--extra", default="",
                   help="more flags for every node (e.g. '--caf_threads 1')")
    args = p.parse_args()
    args.short_steps, args.long_steps = (int(x) for x in args.steps.split(","))
    if args.long_steps <= args.short_steps:
        sys.exit(f"scale_sockets: --steps {args.steps}: the second run must "
                 "be longer than the first")
    ns = [int(x) for x in args.workers.split(",") if x]
    for n in ns:
        if n % args.procs:
            sys.exit(f"scale_sockets: --procs {args.procs} does not divide "
                     f"N = {n}")
    if not args.shared_lo:
        enter_own_network()
    os.makedirs(args.out, exist_ok=True)
    bench = protocol.Bench("scale_sockets")
    rows = []
    for round_no, n in bench.interleaved(args.rounds, ns):
        rec = dict(bench.facts)
        rec["load_before"] = protocol.load_average()
        rec.update(pair(args, n, round_no))
        rec["load_after"] = protocol.load_average()
        rec["round"] = round_no
        rec["command"] = " ".join(sys.argv)
        rows.append(protocol.append(bench.results, rec))
    print_table(rows, bench.facts, args.rounds, args)


if __name__ == "__main__":
    main()
