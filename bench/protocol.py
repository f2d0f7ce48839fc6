"""The benchmark protocol as code (docs/benchmarks.md, "The protocol").

Every comparison script runs its programs through one `Bench`:

- `Bench.interleaved(rounds, entries)` orders the runs: every entry once
  per round, the order reversed in even rounds, so that a busy spell of a
  shared machine hits every side alike.
- `Bench.run(...)` runs one program, bounded in time, and appends one JSON
  line to bench/results/NAME.jsonl: the commit (with "-dirty" when the tree
  has changes), the command, the CPU model, the instruction-set level the
  programs were held to and the levels the CPU has, the core count, the
  load average before and after, wall time, user and system CPU seconds of
  the program and everything it started, and the run's own figures.
  Each run starts once the machine is idle (`settle`): the seconds it
  waited and the busy cores it found are in the record.
- `Bench.table(...)` prints, per configuration, every round's figure,
  min-median-max, the median CPU seconds, and the ratio of medians against
  the best peer; `verdict(...)` calls a target met only if the median
  meets it and the rounds' spread is narrow enough to mean something.

Used as a module (bench/run_resnet_vs_torch.sh, bench/run_peers.sh; the
record helpers by run_big_embedding.sh and run_sparse_pulls.sh too); it
has no dependencies beyond Python's standard library.
"""
import json
import os
import resource
import statistics
import subprocess
import time

# A figure whose rounds spread wider than this (max - min over the median)
# is not accepted: the machine was too busy for one run to say anything;
# run more rounds or on a quieter machine.
SPREAD_LIMIT = 0.25
# Fewer rounds than this give no figure to call met or not met.
MIN_ROUNDS = 3


def commit():
    """HEAD's short hash, "-dirty" added when the tree differs from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip() or "?"
    if subprocess.run(["git", "diff", "--quiet", "HEAD"]).returncode != 0:
        head += "-dirty"
    return head


def lscpu():
    """lscpu's text (the CPU model and its flags)."""
    return subprocess.run(["lscpu"], capture_output=True, text=True).stdout


def _lscpu_field(text, name):
    return next((line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.startswith(name)), None)


def cpu_model(text=None):
    """The CPU's model name as lscpu gives it ("?" when it gives none)."""
    return _lscpu_field(text if text is not None else lscpu(), "Model name") or "?"


def machine_facts():
    """The commit, CPU model, the ISA levels the CPU has and its core count."""
    text = lscpu()
    flags = (_lscpu_field(text, "Flags") or "").split()
    levels = [lvl for lvl, flag in (("avx2", "avx2"), ("avx512", "avx512f"))
              if flag in flags]
    return {"commit": commit(), "cpu": cpu_model(text),
            "cpu_isa_levels": levels, "nproc": os.cpu_count()}


def load_average():
    """The 1, 5 and 15 minute load averages."""
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def busy_cores(window_s):
    """How many cores' worth of CPU time the whole machine spent outside
    idle and I/O wait over the next `window_s` seconds (/proc/stat)."""
    def ticks():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait
    total0, idle0 = ticks()
    time.sleep(window_s)
    total1, idle1 = ticks()
    busy = (total1 - total0) - (idle1 - idle0)
    return busy / os.sysconf("SC_CLK_TCK") / window_s


# Before a run: the machine idle (at most SETTLE_BUSY_CORES busy over
# SETTLE_WINDOW_S), waiting at most SETTLE_MAX_S, so that no program's
# leftovers share the run's cores, and the record says what each start
# found. It did not remove the slow 2-thread runs it was added for: those
# come during a run, with every start idle (docs/benchmarks.md, "The
# protocol").
SETTLE_BUSY_CORES = 0.1
SETTLE_WINDOW_S = 0.5
SETTLE_MAX_S = 15.0


def settle():
    """Waits until the machine is idle (see SETTLE_*); gives the seconds
    waited and the busy cores of the last window, for the record."""
    t0 = time.monotonic()
    while True:
        busy = busy_cores(SETTLE_WINDOW_S)
        waited = time.monotonic() - t0
        if busy <= SETTLE_BUSY_CORES or waited >= SETTLE_MAX_S:
            return round(waited, 2), round(busy, 3)


def timed_run(cmd, timeout, env=None):
    """Runs cmd (its output on stdout dropped; a failure or a run past
    `timeout` seconds raises) and gives a record's load_before,
    load_after, user_s, sys_s and wall_s: for scripts that keep their own
    records (run_big_embedding.sh, run_sparse_pulls.sh) rather than a
    Bench."""
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


def median_min_max(xs):
    xs = sorted(xs)
    return statistics.median(xs), xs[0], xs[-1]


def spread(xs):
    """(max - min) / median of a figure's rounds."""
    med, lo, hi = median_min_max(xs)
    return (hi - lo) / med if med else float("inf")


class Bench:
    def __init__(self, name, results_dir=None):
        # BENCH_RESULTS_DIR sends a trial run's lines elsewhere.
        results_dir = results_dir or os.environ.get("BENCH_RESULTS_DIR", "bench/results")
        self.facts = machine_facts()
        os.makedirs(results_dir, exist_ok=True)
        self.results = os.path.join(results_dir, f"{name}.jsonl")
        self.records = []

    @staticmethod
    def interleaved(rounds, entries):
        """(round, entry) pairs: each entry once per round, even rounds in
        reverse order."""
        for r in range(1, rounds + 1):
            for entry in (entries if r % 2 else list(reversed(entries))):
                yield r, entry

    def run(self, program, config, round_no, cmd, figures, env=None,
            timeout_s=3600, shown=None, isa=None):
        """Runs `cmd` (a list) and records it.

        program: the side ("syncfac", "torch.compile channels-last", ...);
        config: what the comparison holds equal (a dict: threads, isa, ...);
        figures: called after the run, returns the run's figures (a dict;
        what the program printed is self.last_output then);
        shown: the command as recorded (default: cmd), e.g. without
        temporary paths; isa: the level the programs were held to.
        """
        settle_s, busy_before = settle()
        before = load_average()
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              timeout=timeout_s,
                              env=dict(os.environ, **(env or {})))
        wall = time.monotonic() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise RuntimeError(f"bench: {program} (round {round_no}, {config}) "
                               f"exited with {proc.returncode}:\n"
                               f"{proc.stdout[-4000:]}")
        rec = dict(self.facts)
        rec.update({
            "program": program, "config": config, "round": round_no,
            "command": " ".join(shown or cmd),
            "env": env or {}, "isa": isa,
            "load_before": before, "load_after": load_average(),
            "settle_s": settle_s, "busy_cores_before": busy_before,
            "wall_s": round(wall, 3),
            "user_s": round(r1.ru_utime - r0.ru_utime, 3),
            "sys_s": round(r1.ru_stime - r0.ru_stime, 3),
        })
        # What the program printed, for figures() that read it.
        self.last_output = proc.stdout
        rec.update(figures())
        self.records.append(rec)
        return append(self.results, rec)

    def of(self, program, config):
        return [r for r in self.records
                if r["program"] == program and r["config"] == config]

    def table(self, configs, programs, key, ours="syncfac", unit="",
              higher_is_better=True):
        """Markdown rows: per config and program every round's `key`,
        min-median-max, median CPU s; then ours over the best peer."""
        rows = [f"| config | program | {key}{unit}: median (min-max) | every round"
                " | user+sys CPU s (median) | spread |",
                "|---|---|---|---|---|---|"]
        ratios = {}
        for config in configs:
            label = ", ".join(f"{k} {v}" for k, v in config.items())
            best = None
            for program in programs:
                recs = self.of(program, config)
                if not recs:
                    continue
                xs = [r[key] for r in recs]
                med, lo, hi = median_min_max(xs)
                cpu_s = statistics.median(r["user_s"] + r["sys_s"] for r in recs)
                wide = spread(xs)
                rows.append(f"| {label} | {program} | {med:,.1f} ({lo:,.1f}-{hi:,.1f})"
                            f" | {', '.join(f'{x:,.1f}' for x in xs)} | {cpu_s:.1f}"
                            f" | {wide:.0%}{' too wide' if wide > SPREAD_LIMIT else ''} |")
                if program != ours:
                    better = best is None or (med > best[1] if higher_is_better
                                              else med < best[1])
                    if better:
                        best = (program, med, wide)
            mine = self.of(ours, config)
            if mine and best:
                med = statistics.median(r[key] for r in mine)
                ratio = med / best[1] if higher_is_better else best[1] / med
                ratios[label] = {"ratio": ratio, "peer": best[0], "rounds": len(mine),
                                 "spreads": (spread([r[key] for r in mine]), best[2])}
                rows.append(f"| {label} | {ours} / {best[0]} | **{ratio:.2f}x** | | | |")
        return rows, ratios


def verdict(x, target):
    """'met', 'not met' or 'no figure' for one of table()'s ratios: a target
    is met only by the ratio of medians, only over MIN_ROUNDS rounds or
    more, and only when neither side's rounds spread wider than
    SPREAD_LIMIT."""
    ratio, spreads = x["ratio"], x["spreads"]
    if x["rounds"] < MIN_ROUNDS:
        return "no figure (fewer than %d rounds)" % MIN_ROUNDS
    if max(spreads) > SPREAD_LIMIT:
        return "no figure (rounds spread wider than %d %%)" % (SPREAD_LIMIT * 100)
    return "met" if ratio >= target else "not met"
