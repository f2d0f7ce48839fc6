#!/usr/bin/env python3
"""A cost model of one global step at N workers, its parameters measured
by bench/scale_sockets.py (docs/design-4096.md; docs/benchmarks.md,
"Hundreds of workers over sockets").

  scale_model.py [--results bench/results/scale_sockets.jsonl] [--n 4096]
                 [--compute_ms 2] [--nic_gbit 10] [--host_cores 16]
                 [--per_host 32] [--add_gbyte_s 5]

From the JSON lines of scale_sockets.py at the largest N they hold:

  chief_us      the chief's CPU per worker and step (token request, grant)
  shard a, b    a PS shard's CPU per worker and step as a + b * bytes, the
                bytes of that worker's push and pull through the shard
                (2 P / S of P parameter bytes and S shards), a least-squares
                line over the runs with different S
  worker_us     a worker process's CPU per hosted worker and step

The model first predicts the measured runs (every process on this
machine's cores: steps/s = cores / CPU per step), then a step at --n for
three designs, each central role on a host of its own, a NIC of --nic_gbit
per host, the compute a delay of --compute_ms:

  flat          as now: every worker talks to the chief and every shard
  shard tokens  the shards grant the tokens with the pull answers; the
                chief only moves the step on (S messages per step)
  tree          one aggregator per worker host (--per_host workers): it
                sums its workers' gradients and pushes once, pulls once and
                hands the values on; the chief grants it one token per
                host, which it passes on

A step's time is given as a range: the roles' busy times one after the
other (the step's critical path when nothing overlaps) and only the
longest of them (when everything else overlaps with it).
"""

import argparse
import json
import statistics
import sys

PARAMETER_BYTES = 58728


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def fit(records):
    """chief_us, (a, b) of the shards, worker_us from the largest N."""
    n = max(r["n"] for r in records)
    at = [r for r in records if r["n"] == n]
    chief_us = statistics.median(1000 * r["chief_cpu_ms_per_step"] / n
                                 for r in at)
    worker_us = statistics.median(
        1000 * r["worker_proc_cpu_ms_per_step"] * r["procs"] / n for r in at)
    xs = [2 * PARAMETER_BYTES / r["ps"] for r in at]
    ys = [1000 * r["ps0_cpu_ms_per_step"] / n for r in at]
    if len(set(xs)) < 2:
        sys.exit("scale_model: the runs at N = %d have one shard count; "
                 "run scale_sockets.py with another --ps too" % n)
    mx, my = statistics.mean(xs), statistics.mean(ys)
    b = (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
         / sum((x - mx) ** 2 for x in xs))
    a = my - b * mx
    return n, chief_us, (a, b), worker_us


def shard_us(costs, shards):
    a, b = costs
    return a + b * 2 * PARAMETER_BYTES / shards


def predict_here(records, chief_us, costs, worker_us, cores):
    """Every process on `cores` cores: CPU per step over the cores."""
    rows = []
    for n in sorted({r["n"] for r in records}):
        for s in sorted({r["ps"] for r in records if r["n"] == n}):
            rs = [r for r in records if r["n"] == n and r["ps"] == s]
            cpu_us = n * (chief_us + s * shard_us(costs, s) + worker_us)
            model = cores * 1e6 / cpu_us
            measured = statistics.median(r["steps_per_s"] for r in rs)
            rows.append((n, s, len(rs), measured, model))
    return rows


def designs(args, chief_us, costs, worker_us):
    """(name, S, roles' busy ms per step) at args.n, each central role on a
    host of its own."""
    n, p = args.n, PARAMETER_BYTES
    nic = args.nic_gbit * 1e9 / 8
    out = []
    for s in (2, 8, 32):
        shard = n * shard_us(costs, s) / 1e3
        wire = 2 * n * p / s / nic * 1e3
        out.append(("flat", s, {"chief": n * chief_us / 1e3,
                                "shard": max(shard, wire)}))
        out.append(("shard tokens", s, {
            "chief": s * chief_us / 1e3,
            "shard": max(shard + n / s * chief_us / 1e3, wire)}))
        hosts = n // args.per_host
        host = (args.per_host * worker_us / args.host_cores
                + args.per_host * p / (args.add_gbyte_s * 1e9) * 1e6
                + s * shard_us(costs, s)) / 1e3
        out.append(("tree", s, {
            "chief": hosts * chief_us / 1e3,
            "shard": max(hosts * shard_us(costs, s) / 1e3,
                         2 * hosts * p / s / nic * 1e3),
            "aggregator host": host}))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--results", default="bench/results/scale_sockets.jsonl")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--compute_ms", type=float, default=2)
    p.add_argument("--nic_gbit", type=float, default=10)
    p.add_argument("--host_cores", type=int, default=16)
    p.add_argument("--per_host", type=int, default=32)
    p.add_argument("--add_gbyte_s", type=float, default=5)
    args = p.parse_args()
    records = load(args.results)
    n, chief_us, costs, worker_us = fit(records)
    cores = records[0]["nproc"]
    print(f"measured at N = {n} ({records[0]['cpu']}, {cores} cores): chief "
          f"{chief_us:.1f} us per worker and step; a shard "
          f"{costs[0]:.1f} us + {costs[1] * 1e3:.3f} ns per byte through it "
          f"({shard_us(costs, 2):.1f} us per worker and step with 2 shards);"
          f" a worker {worker_us:.0f} us per step in its process")
    print("\nthe measured runs against the model (every process on "
          f"{cores} cores: steps/s = cores / CPU per step)")
    print("| N | shards | runs | measured steps/s (median) | model |")
    print("|---|---|---|---|---|")
    for n_, s, k, measured, model in predict_here(records, chief_us, costs,
                                                  worker_us, cores):
        print(f"| {n_} | {s} | {k} | {measured:.1f} | {model:.1f} |")
    print(f"\nN = {args.n}: each central role on a host of its own, "
          f"{args.nic_gbit:g} Gbit/s NICs, compute {args.compute_ms:g} ms; "
          f"tree: {args.per_host} workers per host of {args.host_cores} "
          f"cores, sums at {args.add_gbyte_s:g} GB/s")
    print("| design | shards | chief ms | a shard ms (CPU or NIC) | "
          "aggregator host ms | global steps/s |")
    print("|---|---|---|---|---|---|")
    for name, s, busy in designs(args, chief_us, costs, worker_us):
        serial = args.compute_ms + sum(busy.values())
        overlap = args.compute_ms + max(busy.values())
        host = busy.get("aggregator host")
        print(f"| {name} | {s} | {busy['chief']:.2f} | {busy['shard']:.2f} | "
              f"{'' if host is None else f'{host:.2f}'} | "
              f"{1e3 / serial:.0f}–{1e3 / overlap:.0f} |")


if __name__ == "__main__":
    main()
