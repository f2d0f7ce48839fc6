#!/usr/bin/env python3
"""Runs the pods of examples/kubernetes/'s manifests on this one host.

There is no Kubernetes here, so this script does what the control plane
would: for the TFJob it writes each pod's TF_CONFIG as Kubeflow's
training-operator does (one entry per replica of every replica type but
the Evaluator, NAME-TYPE-INDEX.NAMESPACE.svc:PORT, the task, "environment":
"cloud"); for the StatefulSets it names the pods SET-ORDINAL with the DNS
names of their headless Service. Then it starts every pod's container
command with the environment the manifest gives it (and HOSTNAME), checks
that each exits 0 and that the chief's summary has the last global step.

What differs from a cluster, and only that: every DNS name maps to an
address of its own on loopback (127.0.0.2, ...) through a private
/etc/hosts in each pod's mount namespace (unshare -m, a bind mount); each
name's port 2222 becomes a free port of its own (the pods share one host's
ports); the data and schedule flags of SYNCFAC_FLAGS / SYNCFAC_EVAL_FLAGS
(--data_dir, --steps, --checkpoint_*, --summary, --metrics, ...) give way
to fake data, 20 steps and files in a temporary directory; --tls_dir /tls
(the manifests' Secret) to certificates scripts/make-cluster-certs.sh
makes in that directory; the programs come from the build's bin directory
on PATH.

usage: kubernetes_manifests.py BIN_DIR MANIFEST_DIR
Exit 0: every pod ended well; 1: a failure (said why), also without
PyYAML (scripts/install-deps.sh) or the right to make mount namespaces
(root, as scripts/test.sh runs).
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

STEPS = 20
MAKE_CERTS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          os.pardir, os.pardir, "scripts",
                          "make-cluster-certs.sh")

try:
    import yaml
except ImportError:
    print("FAIL: no PyYAML (Debian's python3-yaml; scripts/install-deps.sh)")
    sys.exit(1)

# Flags of the manifests that name the cluster's data, schedule and files,
# with the number of values each takes; the test's own replace them.
DROPPED = {"--data_dir": 1, "--steps": 1, "--checkpoint_dir": 1,
           "--checkpoint_every": 1, "--summary": 1, "--metrics": 1,
           "--eval_every_steps": 1, "--num_epochs": 1, "--tls_dir": 1}
NODE_FLAGS = ("--fake_data --fake_train_size 2048 --fake_test_size 500 "
              "--batch_size 32 --threads 1 --steps %d "
              "--connect_timeout_ms 120000 --max_wait_ms 120000" % STEPS)
EVAL_FLAGS = ("--fake_data --fake_test_size 500 --threads 1 --poll_ms 50 "
              "--eval_every_steps 5 --connect_timeout_ms 120000")


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_flags(value, extra):
    words = value.split()
    kept = []
    i = 0
    while i < len(words):
        name = words[i].split("=", 1)[0]
        if name in DROPPED:
            i += 1 + (0 if "=" in words[i] else DROPPED[name])
            continue
        kept.append(words[i])
        i += 1
    return " ".join(kept + [extra])


class Pod:
    def __init__(self, name, job, container, env, dns):
        self.name, self.job, self.dns = name, job, dns
        self.command = list(container.get("command", [])) + list(
            container.get("args", []))
        if not self.command:
            fail(name + ": the container has no command")
        self.env = dict(env)
        self.env["HOSTNAME"] = name
        for e in container.get("env", []):
            if "value" not in e:
                fail("%s: env %s has no literal value" % (name, e["name"]))
            self.env[e["name"]] = e["value"]
        self.proc = None
        self.log = None


def tfjob_pods(doc):
    """The pods of a TFJob, TF_CONFIG as the training-operator writes it."""
    name = doc["metadata"]["name"]
    ns = doc["metadata"].get("namespace", "default")
    specs = doc["spec"]["tfReplicaSpecs"]
    cluster = {}
    for rtype, spec in specs.items():
        rt = rtype.lower()
        if rt == "evaluator":
            continue  # not part of the cluster spec, as in TensorFlow
        port = 2222
        for c in spec["template"]["spec"]["containers"]:
            for p in c.get("ports", []):
                if p.get("name") == "tfjob-port":
                    port = p["containerPort"]
        cluster[rt] = ["%s-%s-%d.%s.svc:%d" % (name, rt, i, ns, port)
                       for i in range(spec.get("replicas", 1))]
    pods = []
    for rtype, spec in specs.items():
        rt = rtype.lower()
        containers = [c for c in spec["template"]["spec"]["containers"]
                      if c["name"] == "tensorflow"]
        if len(containers) != 1:
            fail("TFJob %s: %s needs one container named tensorflow"
                 % (name, rtype))
        for i in range(spec.get("replicas", 1)):
            tf_config = {"cluster": cluster,
                         "task": {"type": rt, "index": i},
                         "environment": "cloud"}
            pod = "%s-%s-%d" % (name, rt, i)
            pods.append(Pod(pod, rt, containers[0],
                            {"TF_CONFIG": json.dumps(tf_config)},
                            "%s.%s.svc" % (pod, ns)))
    return pods


def statefulset_pods(docs):
    services = {d["metadata"]["name"] for d in docs
                if d["kind"] == "Service"
                and d["spec"].get("clusterIP") == "None"}
    pods = []
    for d in docs:
        if d["kind"] != "StatefulSet":
            continue
        name = d["metadata"]["name"]
        ns = d["metadata"].get("namespace", "default")
        svc = d["spec"]["serviceName"]
        if svc not in services:
            fail("StatefulSet %s: no headless Service %s" % (name, svc))
        container = d["spec"]["template"]["spec"]["containers"][0]
        job = {e["name"]: e.get("value") for e in container.get("env", [])
               }.get("SYNCFAC_JOB", name)
        for i in range(d["spec"].get("replicas", 1)):
            pod = "%s-%d" % (name, i)
            pods.append(Pod(pod, job, container, {},
                            "%s.%s.%s.svc.cluster.local" % (pod, svc, ns)))
    return pods


def make_certs(tmp):
    """A cluster CA and one node's files, as the manifests' Secret holds."""
    certs = os.path.join(tmp, "certs")
    r = subprocess.run(["bash", MAKE_CERTS, certs, "tls"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    if r.returncode != 0:
        fail("make-cluster-certs.sh: " + r.stdout)
    return os.path.join(certs, "tls")


def localise(pods, tmp):
    """The loopback addresses, ports, hosts file and test flags."""
    tls = make_certs(tmp)
    hosts = os.path.join(tmp, "hosts")
    with open(hosts, "w") as out:
        out.write("127.0.0.1 localhost\n")
        for k, pod in enumerate(pods):
            out.write("127.0.0.%d %s\n" % (k + 2, pod.dns))
    ports = {pod.dns: free_port() for pod in pods}
    pattern = re.compile(r"([A-Za-z0-9.-]+):2222\b")

    def port_of(m):
        if m.group(1) not in ports:
            fail("%s:2222 is no pod's DNS name" % m.group(1))
        return "%s:%d" % (m.group(1), ports[m.group(1)])

    for pod in pods:
        for key in list(pod.env):
            pod.env[key] = pattern.sub(port_of, pod.env[key])
        for key in ("SYNCFAC_FLAGS", "SYNCFAC_EVAL_FLAGS"):
            if key in pod.env and "--tls_dir" not in pod.env[key].split():
                fail("%s: %s has no --tls_dir: a cluster off loopback "
                     "refuses plaintext" % (pod.name, key))
        if "SYNCFAC_FLAGS" in pod.env:
            extra = NODE_FLAGS + " --tls_dir " + tls
            if pod.job in ("chief", "master"):
                extra += " --summary " + os.path.join(tmp, "summary.json")
            pod.env["SYNCFAC_FLAGS"] = local_flags(pod.env["SYNCFAC_FLAGS"],
                                                   extra)
        if "SYNCFAC_EVAL_FLAGS" in pod.env:
            pod.env["SYNCFAC_EVAL_FLAGS"] = local_flags(
                pod.env["SYNCFAC_EVAL_FLAGS"],
                EVAL_FLAGS + " --tls_dir " + tls + " --metrics "
                + os.path.join(tmp, "eval.jsonl"))
    return hosts


def start(pod, hosts, bin_dir, tmp):
    env = {"PATH": bin_dir + ":/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": tmp, "LANG": "C.UTF-8"}
    env.update(pod.env)
    pod.log = os.path.join(tmp, pod.name + ".log")
    out = open(pod.log, "w")
    argv = ["unshare", "-m", "sh", "-c",
            'mount --bind "$0" /etc/hosts && shift && exec "$@"', hosts,
            "--"] + pod.command
    pod.proc = subprocess.Popen(argv, env=env, stdout=out,
                                stderr=subprocess.STDOUT, cwd=tmp)


def output(pod):
    with open(pod.log) as f:
        return f.read()


def wait_for_line(pod, text, limit):
    deadline = time.time() + limit
    while time.time() < deadline:
        if text in output(pod):
            return True
        if pod.proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def run(pods, bin_dir, tmp, what):
    hosts = localise(pods, tmp)
    # The order a cluster would not need, but a short test does: the last
    # worker starts once the evaluator is in, so that the chief (which
    # waits for every worker) trains with it there.
    first = [p for p in pods if p.job == "ps"]
    first += [p for p in pods if p.job == "evaluator"]
    first += [p for p in pods if p.job in ("chief", "master")]
    workers = [p for p in pods if p.job == "worker"]
    first += workers[:-1]
    try:
        for pod in first:
            start(pod, hosts, bin_dir, tmp)
        for pod in pods:
            if pod.job == "evaluator" and not wait_for_line(
                    pod, "evaluating", 120):
                fail("%s: %s did not join:\n%s" % (what, pod.name,
                                                   output(pod)))
        for pod in workers[-1:]:
            start(pod, hosts, bin_dir, tmp)
        deadline = time.time() + 300
        for pod in pods:
            try:
                code = pod.proc.wait(max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                fail("%s: %s still running after 300 s:\n%s"
                     % (what, pod.name, output(pod)))
            if code != 0:
                fail("%s: %s exited %d:\n%s" % (what, pod.name, code,
                                                output(pod)))
            if pod.job != "evaluator" and "(TLS)" not in output(pod):
                fail("%s: %s did not listen over TLS:\n%s"
                     % (what, pod.name, output(pod)))
            print("%s: %s (%s) exited 0" % (what, pod.name, pod.job))
    finally:
        for pod in pods:
            if pod.proc is not None and pod.proc.poll() is None:
                pod.proc.kill()
                pod.proc.wait()
    with open(os.path.join(tmp, "summary.json")) as f:
        summary = json.load(f)
    if summary.get("global_step") != STEPS:
        fail("%s: the chief's summary ends at global step %s, not %d"
             % (what, summary.get("global_step"), STEPS))
    if summary.get("workers") != len(workers):
        fail("%s: %s workers in the summary, %d pods"
             % (what, summary.get("workers"), len(workers)))
    print("%s: global_step %d, %d workers, test accuracy %s"
          % (what, STEPS, len(workers), summary.get("test_accuracy")))
    evaluators = [p for p in pods if p.job == "evaluator"]
    if evaluators:
        with open(os.path.join(tmp, "eval.jsonl")) as f:
            records = [json.loads(line) for line in f if line.strip()]
        if not records or records[-1].get("step") != STEPS:
            fail("%s: the evaluator's last record is not of step %d: %s"
                 % (what, STEPS, records[-1:]))
        print("%s: the evaluator reported %d times, the last at step %d"
              % (what, len(records), STEPS))


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    bin_dir, manifests = os.path.abspath(sys.argv[1]), sys.argv[2]
    for program in ("convnet_mnist_distributed", "syncfac_evaluator"):
        if not os.access(os.path.join(bin_dir, program), os.X_OK):
            fail("no %s in %s (build it)" % (program, bin_dir))
    if subprocess.run(["unshare", "-m", "true"],
                      stderr=subprocess.DEVNULL).returncode != 0:
        fail("'unshare -m' is not permitted here (root or CAP_SYS_ADMIN, "
             "as scripts/test.sh has): no private /etc/hosts for the pods' "
             "names")
    with open(os.path.join(manifests, "tfjob-kfac.yaml")) as f:
        tfjob = [d for d in yaml.safe_load_all(f) if d]
    with open(os.path.join(manifests, "statefulset-kfac.yaml")) as f:
        sts = [d for d in yaml.safe_load_all(f) if d]
    if [d["kind"] for d in tfjob] != ["TFJob"]:
        fail("tfjob-kfac.yaml: expected one TFJob")
    with tempfile.TemporaryDirectory() as tmp:
        run(tfjob_pods(tfjob[0]), bin_dir, tmp, "TFJob")
    with tempfile.TemporaryDirectory() as tmp:
        run(statefulset_pods(sts), bin_dir, tmp, "StatefulSet")
    print("every pod of both manifests ended well")


if __name__ == "__main__":
    main()
