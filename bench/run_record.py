"""What every round of a bench script records beside its own figures (one
JSON line a run in bench/results/*.jsonl, docs/benchmarks.md): the commit,
the CPU, the load average before and after the run and its CPU and wall
seconds; and the tables' "median (min–max)" of the rounds."""
import json
import resource
import statistics
import subprocess
import time


def commit():
    """HEAD's short hash, "-dirty" added when the tree differs from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    if subprocess.run(["git", "diff", "--quiet", "HEAD"]).returncode != 0:
        head += "-dirty"
    return head


def lscpu():
    """lscpu's text (the CPU model and its flags)."""
    return subprocess.run(["lscpu"], capture_output=True, text=True).stdout


def cpu_model(text=None):
    """The CPU's model name as lscpu gives it ("?" when it gives none)."""
    lines = (text if text is not None else lscpu()).splitlines()
    return next((l.split(":", 1)[1].strip() for l in lines
                 if l.startswith("Model name")), "?")


def load_average():
    """The 1, 5 and 15 minute load averages."""
    return [float(x) for x in open("/proc/loadavg").read().split()[:3]]


def timed_run(cmd, timeout, env=None):
    """Runs cmd (its output on stdout dropped; a failure or a run past
    `timeout` seconds raises) and gives the record's load_before,
    load_after, user_s, sys_s and wall_s."""
    before = load_average()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=timeout,
                   env=env)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"load_before": before, "load_after": load_average(),
            "user_s": round(r1.ru_utime - r0.ru_utime, 2),
            "sys_s": round(r1.ru_stime - r0.ru_stime, 2),
            "wall_s": round(wall, 2)}


def append(results, rec):
    """Appends rec to the JSON-lines file `results`, prints it and gives it
    back."""
    with open(results, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps(rec), flush=True)
    return rec


def median_range(xs, fmt):
    """ "median (min–max)" of xs, each figure as fmt writes it."""
    xs = sorted(xs)
    return f"{fmt(statistics.median(xs))} ({fmt(xs[0])}–{fmt(xs[-1])})"
