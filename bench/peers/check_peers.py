#!/usr/bin/env python3
"""The peer scripts of bench/run_peers.sh still run and still train.

Short runs of the real scripts in the peers' venv, as processes:
  - torch_convnet.py, NCHW and channels-last (with TF's pool padding): exits 0,
    a positive examples/s, the training loss falls over 60 steps;
  - tf_sync_replicas.py as a loopback cluster (1 ps, 2 workers, R = 2, worker 0
    the chief) over gRPC: the chief exits 0 with positive global steps/s, the
    global steps it timed, and a falling loss;
  - bad input to each: exit 2, the message names the file or the flag.
bench/run_peers.sh runs it before it times anything. The venv is
bench/.venv (or PEERS_VENV), made by bench/peers/venv.sh (PyPI); without
torch or tensorflow there it fails, saying so. It is no CTest entry: the
suite does not make that venv (about 2 GB), and an entry that cannot run
would only ever skip.

  check_peers.py SOURCE_DIR
"""
import json
import os
import subprocess
import sys

from tf_cluster import stop

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


class Output(str):
    """A process's stdout and stderr, stderr last; .stdout alone for the figures."""
    stdout = ""


def run(cmd, timeout_s, **kw):
    """Runs cmd to its end, bounded; returns (exit code, output)."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout_s, **kw)
        out = Output(p.stdout + p.stderr)
        out.stdout = p.stdout
        return p.returncode, out
    except subprocess.TimeoutExpired as e:
        partial = e.stdout or b""  # bytes even with text=True
        partial = partial.decode(errors="replace") if isinstance(partial, bytes) else partial
        return None, Output(f"still running after {timeout_s} s: {cmd}\n{partial}")


def summary(output):
    """The SUMMARY line's JSON (stdout only: TensorFlow's threads write to stderr mid-line)."""
    lines = [l for l in output.stdout.splitlines() if l.startswith("SUMMARY ")]
    return json.loads(lines[-1][len("SUMMARY "):]) if lines else None


def free_ports(source, n):
    code, out = run([sys.executable, os.path.join(source, "scripts/free_ports.py"), str(n)], 30)
    if code != 0:
        raise SystemExit(f"free_ports.py {n} failed: {out}")
    return [int(p) for p in out.stdout.split()]


def check_torch(python, peers, env):
    script = os.path.join(peers, "torch_convnet.py")
    for extra, name in (([], "NCHW"), (["--channels_last", "--pool_pad", "tf"], "channels-last, TF pool padding")):
        code, out = run([python, script, "--steps", "60", "--warmup", "10", "--threads", "1",
                         "--seed", "3"] + extra, 300, env=env)
        s = summary(out)
        check(code == 0 and s is not None, f"torch_convnet.py ({name}) exits 0 with a summary: "
                                           f"exit {code}, {out[-400:] if s is None else 'summary'}")
        if s:
            check(s["examples_per_s"] > 0 and s["timed_steps"] == 50,
                  f"torch_convnet.py ({name}) times 50 steps at a positive rate: {s['timed_steps']} "
                  f"steps, {s['examples_per_s']} examples/s")
            check(s["last_loss"] < s["first_loss"],
                  f"torch_convnet.py ({name}) trains: loss {s['first_loss']} -> {s['last_loss']}")
            check(f"examples_per_s {s['examples_per_s']}" in out.stdout,
                  f"torch_convnet.py ({name}) prints the examples_per_s line")
    code, out = run([python, script, "--steps", "30", "--data_dir", "/nonexistent/fashion"], 120, env=env)
    check(code == 2 and "/nonexistent/fashion/train-images-idx3-ubyte" in out,
          f"torch_convnet.py refuses a missing data file by name: exit {code}, {out.strip()[-200:]}")
    code, out = run([python, script, "--steps", "10", "--warmup", "10"], 120, env=env)
    check(code == 2 and "--warmup 10" in out,
          f"torch_convnet.py refuses --warmup >= --steps by name: exit {code}, {out.strip()[-200:]}")


def check_tf(python, peers, source, env):
    script = os.path.join(peers, "tf_sync_replicas.py")
    code, out = run([python, script, "--job", "worker", "--ps_hosts", "127.0.0.1:1",
                     "--worker_hosts", "127.0.0.1"], 120, env=env)
    check(code == 2 and "--worker_hosts" in out and "'127.0.0.1'" in out,
          f"tf_sync_replicas.py refuses a worker address without a port by name: exit {code}, "
          f"{out.strip()[-200:]}")
    ps, w0, w1 = free_ports(source, 3)
    common = [python, script, "--ps_hosts", f"127.0.0.1:{ps}",
              "--worker_hosts", f"127.0.0.1:{w0},127.0.0.1:{w1}", "--replicas_to_aggregate", "2",
              "--steps", "40", "--warmup", "10", "--seed", "1", "--max_wall_s", "240"]
    started = [subprocess.Popen(common + ["--job", "ps"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env),
               subprocess.Popen(common + ["--job", "worker", "--task", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]
    try:
        code, out = run(common + ["--job", "worker", "--task", "0"], 270, env=env)
    finally:
        ps_task, worker_1 = started
        stop(worker_1, 30, term_s=10)  # it may wait on a token after the chief ended
        stop(ps_task, 0, term_s=10)  # the ps never ends by itself
    s = summary(out)
    check(code == 0 and s is not None,
          f"tf_sync_replicas.py's chief exits 0 with a summary: exit {code}, "
          f"{out[-600:] if s is None else 'summary'}")
    if s:
        check(s["global_steps_per_s"] > 0 and 15 <= s["timed_global_steps"] <= 31,
              f"the TensorFlow cluster times the global steps after the warm-up at a positive rate: "
              f"{s['timed_global_steps']} steps, {s['global_steps_per_s']} global steps/s")
        check(abs(s["examples_per_s"] - s["global_steps_per_s"] * 2 * 128) <= 0.01 * s["examples_per_s"] + 1,
              f"examples/s is global steps/s x R x batch: {s['examples_per_s']}")
        check(s["last_loss"] < s["first_loss"],
              f"the TensorFlow cluster trains: loss {s['first_loss']} -> {s['last_loss']}")


def main(argv):
    if len(argv) != 2:
        print("usage: check_peers.py SOURCE_DIR", file=sys.stderr)
        return 2
    source = os.path.abspath(argv[1])
    venv = os.environ.get("PEERS_VENV") or "bench/.venv"
    venv = venv if os.path.isabs(venv) else os.path.join(source, venv)
    python = os.path.join(venv, "bin", "python")
    for module in ("torch", "tensorflow"):
        if not os.path.exists(python) or subprocess.run(
                [python, "-c", f"import {module}"], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, timeout=120).returncode != 0:
            print(f"FAIL {venv} has no {module} (bench/peers/venv.sh torch tf makes it, from PyPI)")
            return 1
    env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2")
    peers = os.path.join(source, "bench", "peers")
    check_torch(python, peers, env)
    check_tf(python, peers, source, env)
    if failures:
        print(f"{len(failures)} check(s) failed", flush=True)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
