#!/usr/bin/env python3
"""Soak run: many loopback clusters, each with random faults injected.

Each round starts a cluster (chief, 3 workers of which one is a backup,
2 PS shards; one process per task, via syncfac-launch) with checkpoints,
and injects one or two faults picked at random: a worker killed and
restarted, the backup killed for good, a worker frozen and thawed, a PS
shard killed and restarted, the chief killed and restarted, a PS shard or
the chief frozen beyond the connection timeout (3 s here) and thawed.
Each round's outcome is checked against its faults, and a round passes
only when every check does (the failed ones are named):

- the run finished every step with exit code 0 and wrote its summary;
- each fault was injected (the launcher reported its signal);
- the summary's counter that matches each fault moved (a lost worker in
  workers_lost, a frozen one's late gradient in stale_pushes, a shard in
  ps_lost, a K-FAC role in kfac_roles_lost, a new chief in
  chief_restarted);
- the account of updates balances: inherited + applied - rolled back is
  the final global step, and every update rolled back was redone;
- the test accuracy is within --tolerance of the undisturbed runs' mean
  (Fashion-MNIST; with --fake every run that trains reaches 1.0, so this
  check then has no power, which the report says).

Per fault kind it reports how many were injected and passed, the test
accuracy against an undisturbed run, the longest pause each fault caused
(from the moment its signal was sent to the chief's next step, every step
logged) and what the summaries accounted for (workers lost and rejoined,
shards lost, steps rolled back, stale pushes dropped). Exit 1 when any
round failed a check.

  bench/soak.py [--rounds N] [--steps S] [--seed K] [--bin DIR] [--fake]
                [--kfac] [--references R] [--tolerance T] [--deterministic]

With --deterministic the cluster has one worker and no initial tokens
(synthetic data, R = 1), which makes a run deterministic
(docs/design.md §6): the faults are those of the shards, the chief and
(with --kfac, run without inverses so that it stays deterministic) the
K-FAC roles, and instead of the accuracy each round's params_digest must
equal the undisturbed runs' (which must agree among themselves).

With --kfac the run is K-FAC with a covariance and an inverse task, and
those are killed and restarted, or frozen and thawed, too.
"""

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

# The launcher puts an ISO 8601 UTC timestamp in front of every line
# (--log_timestamps, on by default).
STAMP = r"^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z )?"
STEP_LINE = re.compile(STAMP + r"\[chief:0\] global_step: (\d+) \|(?!.*test_loss)")
KILL_LINE = re.compile(STAMP + r"syncfac-launch: \S+ gets SIG\w+ at global_step \d+ "
                       r"\(--kill (\S+)\)")


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from free_ports import free_ports  # noqa: E402  (below the ephemeral range)


def write_cluster(path, jobs):
    cluster = {job: ["127.0.0.1:%d" % p for p in free_ports(n)]
               for job, n in jobs.items()}
    with open(path, "w") as f:
        json.dump({"cluster": cluster}, f)


def faults_of(kind, step, rng):
    """Launcher flags for one fault of `kind` at global step `step`."""
    back = rng.choice([200, 1000, 3000])
    if kind == "worker killed, restarted":
        w = rng.randrange(3)
        return ["--kill", "worker:%d@%d" % (w, step),
                "--restart", "worker:%d@%d" % (w, back)]
    if kind == "backup worker killed":
        return ["--kill", "worker:2@%d" % step]
    if kind == "worker frozen, thawed":
        w = rng.randrange(3)
        return ["--kill", "worker:%d@%d:STOP" % (w, step),
                "--kill", "worker:%d@%d:CONT" % (w, step + 15)]
    if kind == "PS shard killed, restarted":
        s = rng.randrange(2)
        return ["--kill", "ps:%d@%d" % (s, step),
                "--restart", "ps:%d@%d" % (s, back)]
    if kind == "chief killed, restarted":
        return ["--kill", "chief:0@%d" % step,
                "--restart", "chief:0@%d" % back]
    if kind in ("covariance task killed, restarted",
                "inverse task killed, restarted"):
        job = kind.split()[0]
        return ["--kill", "%s:0@%d" % (job, step),
                "--restart", "%s:0@%d" % (job, back)]
    if kind.endswith("frozen beyond the connection timeout, thawed"):
        # Twice the connection timeout (base flags): taken for lost, then
        # brought back once thawed.
        task = {"PS": "ps:%d" % rng.randrange(2), "chief": "chief:0",
                "covariance": "covariance:0",
                "inverse": "inverse:0"}[kind.split()[0]]
        return ["--kill", "%s@%d:STOP+%d" % (task, step,
                                             2 * CONNECTION_TIMEOUT_MS)]
    raise ValueError(kind)


KINDS = ["worker killed, restarted", "backup worker killed",
         "worker frozen, thawed", "PS shard killed, restarted",
         "chief killed, restarted",
         "PS shard frozen beyond the connection timeout, thawed",
         "chief frozen beyond the connection timeout, thawed"]
# One worker: the faults whose recovery a deterministic run can check bit
# for bit (a lost worker would leave nobody to take the steps).
DETERMINISTIC_KINDS = ["PS shard killed, restarted",
                       "chief killed, restarted",
                       "PS shard frozen beyond the connection timeout, "
                       "thawed",
                       "chief frozen beyond the connection timeout, "
                       "thawed"]
KFAC_KINDS = ["covariance task killed, restarted",
              "inverse task killed, restarted",
              "covariance task frozen beyond the connection timeout, thawed",
              "inverse task frozen beyond the connection timeout, thawed"]
# Short, so that a freeze beyond it stays a short fault.
CONNECTION_TIMEOUT_MS = 3000


def expected_counter(kind, faults):
    """The summary counter a fault of `kind` must move: (name, moved?)."""
    if kind.startswith("worker frozen"):
        # Its gradient of the step it froze at arrives steps late.
        return "stale_pushes >= 1", lambda s: s.get("stale_pushes", 0) >= 1
    if kind.startswith("worker") or kind.startswith("backup"):
        return ("faults.workers_lost >= 1",
                lambda s: faults(s).get("workers_lost", 0) >= 1)
    if kind.startswith("PS shard"):
        return ("faults.ps_lost >= 1",
                lambda s: faults(s).get("ps_lost", 0) >= 1)
    if kind == "chief killed, restarted":
        return ("faults.chief_restarted",
                lambda s: faults(s).get("chief_restarted") is True)
    if kind.startswith("chief frozen"):
        # It lost its workers (and found its shards gone) while frozen.
        return ("faults.workers_lost >= 1",
                lambda s: faults(s).get("workers_lost", 0) >= 1)
    if kind.startswith("covariance") or kind.startswith("inverse"):
        return ("faults.kfac_roles_lost >= 1",
                lambda s: faults(s).get("kfac_roles_lost", 0) >= 1)
    raise ValueError(kind)


def account_problem(s):
    """Why the summary's account of updates does not balance (None: it
    does)."""
    f = s.get("faults", {})
    keys = ("updates_inherited", "updates_applied", "updates_rolled_back",
            "updates_redone")
    if any(k not in f for k in keys):
        return "no account of updates in the summary (faults.updates_*)"
    held = (f["updates_inherited"] + f["updates_applied"]
            - f["updates_rolled_back"])
    if held != s.get("global_step"):
        return ("inherited %d + applied %d - rolled back %d = %d, not the "
                "global step %s" % (f["updates_inherited"],
                                    f["updates_applied"],
                                    f["updates_rolled_back"], held,
                                    s.get("global_step")))
    if f["updates_redone"] != f["updates_rolled_back"]:
        return ("%d update(s) rolled back but %d redone"
                % (f["updates_rolled_back"], f["updates_redone"]))
    if f.get("rolled_back_steps", 0) != f["updates_rolled_back"]:
        return ("rolled_back_steps %d but updates_rolled_back %d"
                % (f.get("rolled_back_steps", 0), f["updates_rolled_back"]))
    return None


def check_round(args, res, kinds, specs, ref_acc, ref_digest=None):
    """The failed checks of a round (empty: it passed), and its accuracy
    delta."""
    failed = []
    s = res["summary"]
    if res["code"] != 0:
        failed.append("exit code %d" % res["code"])
    if s is None:
        failed.append("no summary")
        return failed, float("nan")
    if s.get("global_step") != args.steps:
        failed.append("global_step %s, not %d" % (s.get("global_step"),
                                                  args.steps))
    for i, (kind, spec) in enumerate(zip(kinds, specs)):
        if spec not in res["injected"]:
            failed.append("%s: never injected (--kill %s did not fire)"
                          % (kind, spec))
        name, moved = expected_counter(kind, lambda x: x.get("faults", {}))
        # The chief counts the losses; one killed after this fault took
        # its count along, and the summary is the new chief's.
        if (name.startswith("faults.")
                and "chief killed, restarted" in kinds[i + 1:]):
            res["unchecked"].append("%s: %s (counted by the chief killed "
                                    "after it)" % (kind, name))
            continue
        if not moved(s):
            failed.append("%s: %s does not hold" % (kind, name))
    problem = account_problem(s)
    if problem:
        failed.append("account of updates: " + problem)
    if ref_digest is not None:
        if s.get("params_digest") != ref_digest:
            failed.append("params_digest %s, undisturbed %s"
                          % (s.get("params_digest"), ref_digest))
        return failed, 0.0
    delta = s.get("test_accuracy", float("nan")) - ref_acc
    if not abs(delta) <= args.tolerance:
        failed.append("test accuracy %.4f is %+.4f from the undisturbed "
                      "runs' %.4f (tolerance %.4f)"
                      % (s.get("test_accuracy", float("nan")), delta,
                         ref_acc, args.tolerance))
    return failed, delta


def run_cluster(args, tmp, flags, faults, tag):
    cluster = os.path.join(tmp, "cluster_%s.json" % tag)
    summary = os.path.join(tmp, "summary_%s.json" % tag)
    jobs = {"chief": 1, "worker": 1 if args.deterministic else 3, "ps": 2}
    if args.kfac:
        jobs.update({"covariance": 1, "inverse": 1})
    write_cluster(cluster, jobs)
    cmd = [os.path.join(args.bin, "syncfac-launch"), "--cluster", cluster,
           "--program", os.path.join(args.bin, "convnet_mnist_distributed"),
           "--max_wall_s", "600"] + faults + ["--"] + flags + [
           "--summary", summary]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    stamps = []
    log = []
    # Per --kill hook: when it fired, and the pause it caused (until the
    # chief's next step, whoever took it).
    fired = {}
    pauses = {}
    injected = set()
    for line in proc.stdout:
        now = time.monotonic()
        log.append(line)
        m = STEP_LINE.match(line)
        if m:
            stamps.append((now, int(m.group(1))))
            for spec, t in list(fired.items()):
                pauses[spec] = now - t
                del fired[spec]
        k = KILL_LINE.match(line)
        if k:
            fired[k.group(1)] = now
            injected.add(k.group(1))
    code = proc.wait()
    wall = time.monotonic() - started
    result = {"code": code, "wall_s": wall, "log": "".join(log),
              "pauses": pauses, "injected": injected, "unchecked": []}
    gaps = [b[0] - a[0] for a, b in zip(stamps, stamps[1:])]
    result["longest_pause_s"] = max(gaps) if gaps else float("nan")
    steps = [s for _, s in stamps]
    result["last_step"] = steps[-1] if steps else -1
    try:
        with open(summary) as f:
            result["summary"] = json.load(f)
    except (OSError, ValueError):
        result["summary"] = None
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", default=os.environ.get("SYNCFAC_BIN_DIR",
                                                    "build/bin"))
    ap.add_argument("--fake", action="store_true",
                    help="fake data instead of Fashion-MNIST")
    ap.add_argument("--references", type=int, default=3,
                    help="undisturbed runs to compare with")
    ap.add_argument("--tolerance", type=float, default=0.05,
                    help="largest test accuracy distance to the "
                         "undisturbed runs' mean (docs/design.md §6)")
    ap.add_argument("--deterministic", action="store_true",
                    help="one worker, no initial tokens: the digest must "
                         "equal the undisturbed runs'")
    ap.add_argument("--kfac", action="store_true",
                    help="K-FAC with a covariance and an inverse task, "
                         "which are killed too")
    args = ap.parse_args()
    for p in ("syncfac-launch", "convnet_mnist_distributed"):
        if not os.access(os.path.join(args.bin, p), os.X_OK):
            sys.exit("soak: %s/%s not built (run scripts/build.sh)"
                     % (args.bin, p))
    rng = random.Random(args.seed)
    data = (["--fake_data", "--fake_train_size", "4096",
             "--fake_test_size", "1000"]
            if args.fake or args.deterministic else [])
    with tempfile.TemporaryDirectory() as tmp:
        base = data + ["--steps", str(args.steps), "--batch_size", "64",
                       "--replicas_to_aggregate", "2", "--threads", "1",
                       "--seed", "3", "--init", "glorot", "--no_progress",
                       "--log_every", "1", "--connect_timeout_ms", "60000",
                       "--max_wait_ms", "60000",
                       "--connection_timeout_ms",
                       str(CONNECTION_TIMEOUT_MS)]
        if args.deterministic:
            base[base.index("--replicas_to_aggregate") + 1] = "1"
            base += ["--num_tokens", "0", "--no_final_eval"]
        if args.kfac and args.deterministic:
            # No inverse ever installed (they would race with the steps).
            base += ["--optimizer", "kfac", "--learning_rate", "0.01",
                     "--min_cov_updates", "1000000"]
        elif args.kfac:
            base += ["--optimizer", "kfac", "--learning_rate", "0.0003"]
        if args.deterministic:
            kinds_here = DETERMINISTIC_KINDS + (KFAC_KINDS if args.kfac
                                                else [])
        else:
            kinds_here = KINDS + (KFAC_KINDS if args.kfac else [])
        # Undisturbed runs vary too (the order in which gradients arrive):
        # the delta is taken against their mean, and their spread shown.
        ref_accs = []
        ref_digests = set()
        for i in range(args.references):
            reference = run_cluster(args, tmp, base, [], "undisturbed%d" % i)
            if reference["code"] != 0 or not reference["summary"]:
                print(reference["log"])
                sys.exit("soak: the undisturbed run failed")
            ref_digests.add(reference["summary"].get("params_digest"))
            if args.deterministic:
                ref_accs.append(float("nan"))
                print("undisturbed: params_digest %s, %.1f s"
                      % (reference["summary"].get("params_digest"),
                         reference["wall_s"]), flush=True)
                continue
            ref_accs.append(reference["summary"]["test_accuracy"])
            print("undisturbed: test accuracy %.4f, longest gap between "
                  "steps %.3f s, %.1f s" % (ref_accs[-1],
                                            reference["longest_pause_s"],
                                            reference["wall_s"]), flush=True)
        ref_digest = None
        if args.deterministic:
            if len(ref_digests) != 1:
                sys.exit("soak: the undisturbed runs differ (%s): the run "
                         "is not deterministic" % ", ".join(
                             sorted(str(d) for d in ref_digests)))
            ref_digest = next(iter(ref_digests))
        ref_acc = statistics.mean(ref_accs)
        if not args.deterministic:
            print("undisturbed: mean test accuracy %.4f (%.4f to %.4f)"
                  % (ref_acc, min(ref_accs), max(ref_accs)), flush=True)
        if args.fake and not args.deterministic:
            print("note: on --fake data every run that trains reaches "
                  "accuracy 1.0: the accuracy check has no power",
                  flush=True)
        per_kind = {k: {"injected": 0, "passed": 0, "deltas": [],
                        "pauses": []} for k in kinds_here}
        totals = {"workers_lost": 0, "workers_rejoined": 0, "ps_lost": 0,
                  "kfac_roles_lost": 0,
                  "rolled_back_steps": 0, "stale_pushes": 0,
                  "chief_restarts": 0}
        for r in range(args.rounds):
            kinds = rng.sample(kinds_here, rng.choice([1, 2]))
            faults = []
            specs = []
            # Far enough apart that one recovery ends before the next
            # fault; after the first checkpoint (every 25 steps).
            first = rng.randrange(30, args.steps // 2)
            for i, kind in enumerate(kinds):
                flags_of_kind = faults_of(kind, first + i * (args.steps // 4),
                                          rng)
                faults += flags_of_kind
                spec = flags_of_kind[1]
                specs.append(spec if ":" in spec.split("@")[1]
                             else spec + ":KILL")
            ckpt = os.path.join(tmp, "ckpt_%d" % r)
            flags = base + ["--checkpoint_dir", ckpt,
                            "--checkpoint_every", "25"]
            res = run_cluster(args, tmp, flags, faults, str(r))
            s = res["summary"]
            failed_checks, delta = check_round(args, res, kinds, specs,
                                               ref_acc, ref_digest)
            ok = not failed_checks
            for kind, spec in zip(kinds, specs):
                k = per_kind[kind]
                k["injected"] += 1
                if ok:
                    k["passed"] += 1
                    k["deltas"].append(delta)
                    if spec in res["pauses"]:
                        k["pauses"].append(res["pauses"][spec])
            if s is not None:
                f = s.get("faults", {})
                for key in ("workers_lost", "workers_rejoined", "ps_lost",
                            "kfac_roles_lost", "rolled_back_steps"):
                    totals[key] += f.get(key, 0)
                totals["chief_restarts"] += 1 if f.get("chief_restarted") \
                    else 0
                totals["stale_pushes"] += s.get("stale_pushes", 0)
            print("round %d: %s -> %s (%.1f s, longest pause %.2f s, %s)" % (
                      r + 1, " + ".join(kinds),
                      "passed" if ok else "FAILED: " + "; ".join(
                          failed_checks),
                      res["wall_s"], res["longest_pause_s"],
                      "digest checked" if args.deterministic
                      else "accuracy delta %+.4f" % delta),
                  flush=True)
            for note in res["unchecked"]:
                print("  not checked: " + note, flush=True)
            if not ok:
                print(res["log"][-4000:])
        print()
        print("| fault | injected | passed | %s | longest pause s (max) |"
              % ("params_digest" if args.deterministic
                 else "accuracy delta (mean, worst)"))
        print("|---|---|---|---|---|")
        for kind in kinds_here:
            k = per_kind[kind]
            if k["injected"] == 0:
                continue
            d = k["deltas"]
            print("| %s | %d | %d | %s | %s |" % (
                kind, k["injected"], k["passed"],
                ("undisturbed's in %d" % len(d) if args.deterministic
                 else "%+.4f, %+.4f" % (statistics.mean(d), min(d)))
                if d else "-",
                "%.2f" % max(k["pauses"]) if k["pauses"] else "-"))
        print()
        print("accounted in the summaries: " + ", ".join(
            "%s %d" % kv for kv in totals.items()))
        failed = sum(k["injected"] - k["passed"] for k in per_kind.values())
        sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
