#!/usr/bin/env python3
"""TensorFlow's SyncReplicasOptimizer as one command: a loopback cluster of
one ps and N workers (bench/peers/tf_sync_replicas.py), worker 0 the chief.

Started and waited for as one program, so that the benchmark protocol
(bench/protocol.py) counts every task's CPU time. The chief writes the
summary; after it ends, the other workers get 30 s and the ps none (it never
returns from server.join()); each is then sent SIGTERM, then SIGKILL. A
cluster whose port was taken in the meantime (another program bound it
first) starts again on new ports, three tries.

  tf_cluster.py --workers 2 --summary S.json [tf_sync_replicas.py flags]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PORT_TAKEN = re.compile(r"address already in use|could not start grpc server|failed to bind", re.I)


def stop(proc, wait_s, term_s=1):
    """Waits wait_s for proc to end, then sends SIGTERM and waits term_s,
    then SIGKILL."""
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=term_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def once(a, rest, logs):
    ports = subprocess.run([sys.executable, f"{HERE}/../../scripts/free_ports.py", str(a.workers + 1)],
                           capture_output=True, text=True, check=True).stdout.split()
    hosts = [f"127.0.0.1:{p}" for p in ports]
    common = [sys.executable, f"{HERE}/tf_sync_replicas.py", "--ps_hosts", hosts[0],
              "--worker_hosts", ",".join(hosts[1:])] + rest
    def start(job, task, extra=()):
        log = open(os.path.join(logs, f"{job}{task}.log"), "w")
        return subprocess.Popen(common + ["--job", job, "--task", str(task), *extra],
                                stdout=log, stderr=subprocess.STDOUT)
    others = [start("ps", 0)] + [start("worker", i) for i in range(1, a.workers)]
    chief = start("worker", 0, ["--summary", a.summary])
    rc = chief.wait()
    for proc in others[1:]:
        stop(proc, 30)
    stop(others[0], 0)
    return rc


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--summary", required=True)
    a, rest = p.parse_known_args()
    with tempfile.TemporaryDirectory() as logs:
        for _ in range(3):
            rc = once(a, rest, logs)
            if rc == 0:
                return 0
            text = "".join(open(os.path.join(logs, f)).read() for f in os.listdir(logs))
            if not PORT_TAKEN.search(text):
                break
            print("tf_cluster: a port was taken; again on new ports", file=sys.stderr)
        for f in sorted(os.listdir(logs)):
            print(f"== {f}", file=sys.stderr)
            print("".join(open(os.path.join(logs, f)).readlines()[-20:]), file=sys.stderr)
        print(f"tf_cluster: the TensorFlow SyncReplicas cluster failed (exit {rc})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
