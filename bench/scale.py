#!/usr/bin/env python3
"""The sync protocol at scale, and stragglers (docs/benchmarks-history.md, "Hundreds
of workers" and "Stragglers and backup workers").

Every worker's device is the benchmark-only delay device
(--device bench_delay:MS[:pareto:ALPHA|:lognormal:SIGMA]): its compute is a
delay, its gradients zeros, so what a run costs is the protocol's own cost
(the chief, the PS shards, the workers' actors and the messages between).
The model is a small MLP (--mlp_hidden), fake data, SGD.

  scale.py scale      --bin DIR --out DIR [--workers 8,32,128,512]
                      [--procs 4,8,16] [--repeats 3] [--steps 400]
                      [--delay_ms 2] [--ps 2] [--hidden 8]
  scale.py stragglers --bin DIR --out DIR [--replicas 16]
                      [--backups 0,1,2,4,8] [--dist pareto:1.5]
                      [--delay_ms 20] [--steps 150] [--repeats 3]
  scale.py plot       --out DIR   (needs matplotlib: run_scale.sh makes a venv)

Each run's CPU time comes from the kernel (os.wait4's rusage of that
process), its memory from the run's summary (in one process) or from
/proc/PID/status polled every 50 ms (as processes); the chief's and a
shard's CPU per step from the runs as processes, one process per task on
loopback.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

COMMON = ["--fake_data", "--model", "mlp", "--optimizer", "sgd",
          "--learning_rate", "0.01", "--batch_size", "4", "--no_final_eval",
          "--no_progress", "--log_every", "100000", "--threads", "1",
          "--seed", "1"]


def run_measured(cmd, log_path, timeout=900):
    """Runs cmd, returns (exit code, rusage) of that process."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status), usage
            if time.time() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                return -9, usage
            time.sleep(0.05)


def rss_mib(pid):
    """The process's resident set now (VmRSS), 0 once it is gone. The
    rusage's ru_maxrss is no use here: a child forked from this script
    starts with the script's high-water mark."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0


def cpu_s(usage):
    return usage.ru_utime + usage.ru_stime


def device(delay_ms, dist):
    return f"bench_delay:{delay_ms}" + (f":{dist}" if dist else "")


def in_process(args, n, r, steps, dist, name):
    summary = os.path.join(args.out, name + ".json")
    cmd = [os.path.join(args.bin, "convnet_mnist_single")] + COMMON + [
        "--mlp_hidden", str(args.hidden),
        "--fake_train_size", str(max(2048, 4 * n * 2)),
        "--fake_test_size", "100",
        "--device", device(args.delay_ms, dist),
        "--worker_replicas", str(n), "--replicas_to_aggregate", str(r),
        "--ps_tasks", str(args.ps), "--steps", str(steps),
        "--warmup", str(max(steps // 5, 1)),
        "--step_timeout_ms", "600000", "--summary", summary]
    rc, usage = run_measured(cmd, os.path.join(args.out, name + ".log"))
    if rc != 0:
        sys.exit(f"bench: {name} failed (exit {rc}), see "
                 f"{os.path.join(args.out, name + '.log')}")
    s = json.load(open(summary))
    t = s["transfers"]
    # Every worker pushes once per token and the chief puts max(N, R)
    # tokens per step: pushes per global step = max(N, R).
    steps_per_s = s["examples_per_s"] / (4 * max(n, r))
    return {"n": n, "r": r, "steps": s["global_step"],
            "steps_per_s": steps_per_s, "train_s": s["train_s"],
            "cpu_s": cpu_s(usage), "maxrss_mib": s["peak_rss_mib"],
            "token_wait_ms": t.get("token_wait_ms_per_worker_step", 0),
            "ratio_to_minimum": t["ratio_to_minimum"],
            "messages_per_global_step":
                t["sent_by_workers"].get("messages_per_global_step", 0)
                + t["sent_by_shards"].get("messages_per_global_step", 0)
                + t["sent_by_chief"].get("messages_per_global_step", 0),
            # Counted by the shards: pushes times shards.
            "stale_share": s["stale_pushes"]
                / max(1, s["stale_pushes"] + s["accepted_pushes"])}


def free_ports(count):
    """`count` distinct free ports below the ephemeral range
    (scripts/free_ports.py)."""
    return [int(p) for p in subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                           "scripts", "free_ports.py"), str(count)],
        capture_output=True, text=True, check=True).stdout.split()]


def loopback_cluster(jobs):
    """A cluster file's contents: `jobs` (job, task count) on free
    loopback ports."""
    ports = iter(free_ports(sum(k for _, k in jobs)))
    return {"cluster": {job: [f"127.0.0.1:{next(ports)}" for _ in range(k)]
                        for job, k in jobs}}


def run_cluster(prog, cfile, tasks, flags, out, name, timeout_s):
    """Runs one process of `prog` per (job, index) of `tasks`, each logging
    to out/NAME_JOBI.log; returns each one's rusage and peak RSS (MiB, by
    task). Exits naming the tasks that failed, or the time that ran out."""
    procs = []
    for job, i in tasks:
        log = open(os.path.join(out, f"{name}_{job}{i}.log"), "w")
        cmd = [prog, "--cluster", cfile, "--job_name", job, "--task", str(i)]
        procs.append(((job, i), subprocess.Popen(
            cmd + flags, stdout=log, stderr=subprocess.STDOUT), log))
    usage, peak, codes = {}, {}, {}
    deadline = time.time() + timeout_s
    while len(usage) < len(procs):
        for key, p, log in procs:
            if key in usage:
                continue
            peak[key] = max(peak.get(key, 0), rss_mib(p.pid))
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                usage[key] = ru
                codes[key] = os.waitstatus_to_exitcode(status)
                log.close()
        failed = [k for k, c in codes.items() if c != 0]
        if failed or time.time() > deadline:
            for key, p, _ in procs:
                if key not in usage:
                    p.kill()
                    p.wait()
            sys.exit(f"bench: {name}: "
                     + (f"tasks {failed} exited with "
                        f"{[codes[k] for k in failed]}" if failed
                        else f"not done within {timeout_s} s")
                     + f", see {out}/{name}_*.log")
        time.sleep(0.05)
    return usage, peak


def as_processes(args, n, steps, name):
    """chief, args.ps shards and n workers, one process each on loopback."""
    tasks = [("chief", 0)] + [("ps", i) for i in range(args.ps)] + [
        ("worker", i) for i in range(n)]
    cluster = loopback_cluster([("chief", 1), ("ps", args.ps),
                                ("worker", n)])
    cfile = os.path.join(args.out, name + "_cluster.json")
    json.dump(cluster, open(cfile, "w"))
    summary = os.path.join(args.out, name + ".json")
    flags = COMMON + [
        "--mlp_hidden", str(args.hidden),
        "--fake_train_size", str(max(2048, 4 * n * 2)),
        "--fake_test_size", "100", "--device", device(args.delay_ms, None),
        "--steps", str(steps), "--warmup", str(max(steps // 5, 1)),
        "--step_timeout_ms", "600000", "--connect_timeout_ms", "120000",
        "--summary", summary]
    prog = os.path.join(args.bin, "convnet_mnist_distributed")
    usage, peak = run_cluster(prog, cfile, tasks, flags, args.out, name, 900)
    s = json.load(open(summary))
    g = s["global_step"]
    workers = [usage[("worker", i)] for i in range(n)]
    return {"n": n, "r": n, "steps": g,
            "steps_per_s": s["examples_per_s"] / (4 * n),
            "chief_cpu_ms_per_step": 1000 * cpu_s(usage[("chief", 0)]) / g,
            "ps0_cpu_ms_per_step": 1000 * cpu_s(usage[("ps", 0)]) / g,
            "worker_cpu_ms_per_step":
                1000 * statistics.mean(cpu_s(u) for u in workers) / g,
            "worker_maxrss_mib":
                statistics.mean(peak[("worker", i)] for i in range(n)),
            "chief_maxrss_mib": peak[("chief", 0)],
            "token_wait_ms":
                s["transfers"].get("token_wait_ms_per_worker_step", 0),
            "ratio_to_minimum": s["transfers"]["ratio_to_minimum"]}


def spread(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def scale(args):
    os.makedirs(args.out, exist_ok=True)
    ns = [int(x) for x in args.workers.split(",") if x]
    result = {"delay_ms": args.delay_ms, "ps": args.ps, "hidden": args.hidden,
              "steps": args.steps, "repeats": args.repeats,
              "in_process": [], "processes": []}
    for n in ns:
        # The CPU of a short run taken from a long one's: what the steps
        # cost, without the start (spawning N workers, data, model).
        short = in_process(args, n, n, max(args.steps // 4, 20), None,
                           f"inproc_{n}_short")
        runs = [in_process(args, n, n, args.steps, None, f"inproc_{n}_{k}")
                for k in range(args.repeats)]
        per_step = [1000 * (x["cpu_s"] - short["cpu_s"])
                    / (x["steps"] - short["steps"]) for x in runs]
        row = {"n": n,
               "steps_per_s": spread([x["steps_per_s"] for x in runs]),
               "cpu_ms_per_step": spread(per_step),
               "token_wait_ms": spread([x["token_wait_ms"] for x in runs]),
               "maxrss_mib": spread([x["maxrss_mib"] for x in runs]),
               "ratio_to_minimum": spread([x["ratio_to_minimum"]
                                           for x in runs]),
               "messages_per_global_step":
                   statistics.median(x["messages_per_global_step"]
                                     for x in runs)}
        result["in_process"].append(row)
        print(json.dumps(row), flush=True)
    for n in [int(x) for x in args.procs.split(",") if x]:
        runs = [as_processes(args, n, args.proc_steps, f"procs_{n}_{k}")
                for k in range(args.repeats)]
        row = {"n": n}
        for key in ("steps_per_s", "chief_cpu_ms_per_step",
                    "ps0_cpu_ms_per_step", "worker_cpu_ms_per_step",
                    "worker_maxrss_mib", "chief_maxrss_mib", "token_wait_ms",
                    "ratio_to_minimum"):
            row[key] = spread([x[key] for x in runs])
        result["processes"].append(row)
        print(json.dumps(row), flush=True)
    # Memory per worker: the slope of peak RSS over N in one process.
    rows = result["in_process"]
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        result["mib_per_worker_in_process"] = (
            (b["maxrss_mib"]["median"] - a["maxrss_mib"]["median"])
            / (b["n"] - a["n"]))
    json.dump(result, open(os.path.join(args.out, "scale.json"), "w"),
              indent=1)
    print_scale(result)


def fmt(s, f="{:.1f}"):
    return (f.format(s["median"]) + " (" + f.format(s["min"]) + "–"
            + f.format(s["max"]) + ")")


def print_scale(r):
    print(f"\nin one process: delay {r['delay_ms']} ms per step, MLP hidden "
          f"{r['hidden']}, {r['ps']} PS shards, R = N, {r['steps']} steps, "
          f"median (min–max) of {r['repeats']}")
    print("| N | global steps/s | process CPU ms per global step | CPU ms per "
          "step and worker | token wait ms | peak RSS MiB | messages per "
          "step | bytes vs minimum |")
    print("|---|---|---|---|---|---|---|---|")
    for x in r["in_process"]:
        per_worker = x["cpu_ms_per_step"]["median"] / x["n"]
        print(f"| {x['n']} | {fmt(x['steps_per_s'])} | "
              f"{fmt(x['cpu_ms_per_step'], '{:.2f}')} | {per_worker:.3f} | "
              f"{fmt(x['token_wait_ms'], '{:.2f}')} | "
              f"{x['maxrss_mib']['median']:.0f} | "
              f"{x['messages_per_global_step']:.0f} | "
              f"{x['ratio_to_minimum']['median']:.3f}x |")
    if "mib_per_worker_in_process" in r:
        print(f"\nmemory per worker in one process: "
              f"{r['mib_per_worker_in_process']:.3f} MiB (slope of peak RSS)")
    if r["processes"]:
        print("\nas processes on loopback (chief, PS shards and N workers, one "
              "process each)")
        print("| N | global steps/s | chief CPU ms/step | ps:0 CPU ms/step | "
              "worker CPU ms/step | worker peak RSS MiB | token wait ms | "
              "bytes vs minimum |")
        print("|---|---|---|---|---|---|---|---|")
        for x in r["processes"]:
            print(f"| {x['n']} | {fmt(x['steps_per_s'])} | "
                  f"{fmt(x['chief_cpu_ms_per_step'], '{:.2f}')} | "
                  f"{fmt(x['ps0_cpu_ms_per_step'], '{:.2f}')} | "
                  f"{fmt(x['worker_cpu_ms_per_step'], '{:.2f}')} | "
                  f"{x['worker_maxrss_mib']['median']:.0f} | "
                  f"{fmt(x['token_wait_ms'], '{:.2f}')} | "
                  f"{x['ratio_to_minimum']['median']:.3f}x |")


def stragglers(args):
    os.makedirs(args.out, exist_ok=True)
    r = args.replicas
    result = {"replicas": r, "dist": args.dist, "delay_ms": args.delay_ms,
              "steps": args.steps, "repeats": args.repeats, "rows": []}
    for dist in [None, args.dist]:
        for b in [int(x) for x in args.backups.split(",") if x]:
            n = r + b
            tag = (dist or "fixed").replace(":", "")
            runs = [in_process(args, n, r, args.steps, dist,
                               f"strag_{tag}_{n}_{k}")
                    for k in range(args.repeats)]
            ms = [1000 / x["steps_per_s"] for x in runs]
            row = {"dist": dist or "fixed", "n": n, "backups": b,
                   "ms_per_step": spread(ms),
                   "stale_share": statistics.median(
                       x["stale_share"] for x in runs)}
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
    json.dump(result, open(os.path.join(args.out, "stragglers.json"), "w"),
              indent=1)
    print_stragglers(result)


def print_stragglers(r):
    print(f"\nR = {r['replicas']}, compute {r['delay_ms']} ms per step times a "
          f"factor of mean 1 ({r['dist']}), {r['steps']} steps, median "
          f"(min–max) of {r['repeats']}")
    print("| compute time | N | backups | ms per global step | vs N = R | "
          "stale pushes |")
    print("|---|---|---|---|---|---|")
    base = {}
    for x in r["rows"]:
        if x["backups"] == 0:
            base[x["dist"]] = x["ms_per_step"]["median"]
        rel = x["ms_per_step"]["median"] / base[x["dist"]]
        print(f"| {x['dist']} | {x['n']} | {x['backups']} | "
              f"{fmt(x['ms_per_step'])} | {rel:.2f}x | "
              f"{x['stale_share']:.1%} |")


def plot(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(args.figures, exist_ok=True)
    path = os.path.join(args.out, "scale.json")
    if os.path.exists(path):
        r = json.load(open(path))
        fig, ax = plt.subplots(figsize=(6, 4))
        for key, label in (("in_process", "in one process"),
                           ("processes", "processes on loopback")):
            rows = r[key]
            if not rows:
                continue
            ns = [x["n"] for x in rows]
            med = [x["steps_per_s"]["median"] for x in rows]
            lo = [m - x["steps_per_s"]["min"] for m, x in zip(med, rows)]
            hi = [x["steps_per_s"]["max"] - m for m, x in zip(med, rows)]
            ax.errorbar(ns, med, yerr=[lo, hi], marker="o", capsize=3,
                        label=label)
        ax.axhline(1000 / r["delay_ms"], ls=":", c="grey",
                   label=f"compute bound ({r['delay_ms']} ms per step)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers N (R = N)")
        ax.set_ylabel("global steps/s")
        ax.set_title("syncfac: one chief, "
                     f"{r['ps']} PS shards, delay device (2 busy cores)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.figures, "scale_steps_per_s.png"),
                    dpi=120)
    path = os.path.join(args.out, "stragglers.json")
    if os.path.exists(path):
        r = json.load(open(path))
        fig, ax = plt.subplots(figsize=(6, 4))
        for dist in dict.fromkeys(x["dist"] for x in r["rows"]):
            rows = [x for x in r["rows"] if x["dist"] == dist]
            bs = [x["backups"] for x in rows]
            med = [x["ms_per_step"]["median"] for x in rows]
            lo = [m - x["ms_per_step"]["min"] for m, x in zip(med, rows)]
            hi = [x["ms_per_step"]["max"] - m for m, x in zip(med, rows)]
            ax.errorbar(bs, med, yerr=[lo, hi], marker="o", capsize=3,
                        label=f"compute time {dist}")
        ax.set_xlabel(f"backup workers N − R (R = {r['replicas']})")
        ax.set_ylabel("ms per global step")
        ax.set_title("Backup workers against stragglers (Chen et al. 2016)")
        ax.set_ylim(bottom=0)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.figures, "stragglers_backups.png"),
                    dpi=120)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=["scale", "stragglers", "plot"])
    p.add_argument("--bin", default="build/bin")
    p.add_argument("--out", default="bench/results/scale")
    p.add_argument("--figures", default="docs/figures")
    p.add_argument("--workers", default="8,32,128,512")
    p.add_argument("--procs", default="4,8,16")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--proc_steps", type=int, default=300)
    p.add_argument("--delay_ms", type=float, default=2)
    p.add_argument("--ps", type=int, default=2)
    p.add_argument("--hidden", type=int, default=8)
    p.add_argument("--replicas", type=int, default=16)
    p.add_argument("--backups", default="0,1,2,4,8")
    p.add_argument("--dist", default="pareto:1.5")
    args = p.parse_args()
    {"scale": scale, "stragglers": stragglers, "plot": plot}[args.mode](args)


if __name__ == "__main__":
    main()
