#!/usr/bin/env python3
"""Checks examples/kubernetes/'s manifests and runs their pods on this host.

Each file holds what its run needs: every volume's PersistentVolumeClaim
(ReadWriteMany, with a storage request) and ConfigMap, each --config-file
a key of a mounted ConfigMap, every container the image the Dockerfile
builds (IMAGE, named in the Dockerfile's build command), every pod the
annotation sidecar.istio.io/inject: "false" and securityContext.fsGroup
the group of the Dockerfile's USER (so that the volume is writable).

There is no Kubernetes here, so this script does what the control plane
would: for the TFJob it writes each pod's TF_CONFIG as Kubeflow's
training-operator does (one entry per replica of every replica type but
the Evaluator, NAME-TYPE-INDEX.NAMESPACE.svc:PORT, the task, "environment":
"cloud"); for the StatefulSets it names the pods SET-ORDINAL with the DNS
names of their headless Service. Then it starts every pod's container
command with the environment the manifest gives it (and HOSTNAME), checks
that each exits 0 and that the chief's summary has the last global step.
The volumes are directories of a temporary directory: a claim's is shared
by the pods that mount it, a ConfigMap's holds its keys as files; the
mount paths in the commands and the environment name those directories.

What differs from a cluster, and only that: every DNS name maps to an
address of its own on loopback (127.0.0.2, ...) through a private
/etc/hosts in each pod's mount namespace (unshare -m, a bind mount); each
name's port 2222 becomes a free port of its own (the pods share one host's
ports); the data and schedule settings of the ConfigMaps' flag files
(data_dir, steps, checkpoint_*, metrics, ...) give way to fake data, 20
steps and files in the temporary directory; the programs come from the
build's bin directory on PATH; each job's Secret's certificates
(scripts/make-cluster-certs.sh --per_job, from the cluster file beside the
manifest, which must name the pods) are made in the temporary directory. Every
node's flag file must name --tls_dir and every evaluator's too: a cluster
off loopback refuses plaintext (docs/tls.md).

usage: kubernetes_manifests.py BIN_DIR MANIFEST_DIR IMAGE DOCKERFILE
Exit 0: every pod ended well; 1: a failure (said why), also without
PyYAML (scripts/install-deps.sh) or the right to make mount namespaces
(root, as scripts/test.sh runs).
"""

import json
import os
import re
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

# Settings of the ConfigMaps' flag files that name the cluster's data,
# schedule and files; the test's own replace them.
DROPPED = {"data_dir", "steps", "checkpoint_dir", "checkpoint_every",
           "metrics", "eval_every_steps", "num_epochs", "tls_dir"}
NODE_SETTINGS = {"fake_data": "true", "fake_train_size": "2048",
                 "fake_test_size": "500", "batch_size": "32", "threads": "1",
                 "steps": str(STEPS), "connect_timeout_ms": "120000",
                 "max_wait_ms": "120000"}
EVAL_SETTINGS = {"fake_data": "true", "fake_test_size": "500",
                 "threads": "1", "poll_ms": "50", "eval_every_steps": "5",
                 "connect_timeout_ms": "120000"}
ISTIO = "sidecar.istio.io/inject"


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


# Ports below the kernel's ephemeral range (scripts/free_ports.py says why).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts"))
from free_ports import free_ports  # noqa: E402


def local_flag_file(text, settings):
    """A flag file (INI-style, --config-file) with the test's settings in
    place of DROPPED's: the file's other lines stay as they are, so that
    the programs read them."""
    kept = []
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        if "=" in line and key in DROPPED:
            continue
        kept.append(line)
    kept += ["%s = %s" % kv for kv in settings.items()]
    return "\n".join(kept) + "\n"


def make_certs(tmp, pods, cluster_file):
    """Each task's certificate, as the manifest's header makes them: from
    the cluster file shipped beside it (which must name exactly the pods'
    DNS names) plus the pods outside it (the evaluator), in one flat
    directory per job, as each job's Secret holds them."""
    with open(cluster_file) as f:
        shipped = json.load(f)["cluster"]
    in_cluster = {}
    extra = []
    for pod in pods:
        index = int(pod.name.rsplit("-", 1)[1])
        if pod.job in shipped:
            in_cluster.setdefault(pod.job, {})[index] = pod.dns + ":2222"
        else:
            extra.append("%s:%d@%s" % (pod.job, index, pod.dns))
    expected = {job: [by_index[i] for i in sorted(by_index)]
                for job, by_index in in_cluster.items()}
    if expected != shipped:
        fail("%s names %s, but the manifest's pods are %s: the "
             "certificates it makes would not fit them"
             % (cluster_file, shipped, expected))
    certs = os.path.join(tmp, "certs")
    r = subprocess.run(["bash", MAKE_CERTS, "--per_job", "--cluster",
                        cluster_file, certs] + extra,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    if r.returncode != 0:
        fail("make-cluster-certs.sh: " + r.stdout)
    return os.path.join(certs, "per-job")


def check_manifest(docs, fname, image, fs_group):
    """The static checks of the module's docstring, for one file."""
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    claims = by_kind.get("PersistentVolumeClaim", {})
    config_maps = by_kind.get("ConfigMap", {})
    for name, cm in config_maps.items():
        for key, text in cm.get("data", {}).items():
            if not re.search(r"^\s*tls_dir\s*=", text, re.M):
                fail("%s: ConfigMap %s's %s has no tls_dir: a cluster off "
                     "loopback refuses plaintext" % (fname, name, key))
    for name, claim in claims.items():
        if "ReadWriteMany" not in claim["spec"].get("accessModes", []):
            fail("%s: claim %s is not ReadWriteMany (every pod mounts it)"
                 % (fname, name))
        if not claim["spec"].get("resources", {}).get("requests", {}).get(
                "storage"):
            fail("%s: claim %s requests no storage" % (fname, name))
    templates = []
    for d in docs:
        if d["kind"] == "TFJob":
            templates += [(d["metadata"]["name"] + "/" + t, s["template"])
                          for t, s in d["spec"]["tfReplicaSpecs"].items()]
        elif d["kind"] == "StatefulSet":
            templates.append((d["metadata"]["name"], d["spec"]["template"]))
    if not templates:
        fail("%s: no pod templates" % fname)
    for where, t in templates:
        where = "%s: %s" % (fname, where)
        annotations = t.get("metadata", {}).get("annotations", {})
        if annotations.get(ISTIO) != "false":
            fail('%s: no annotation %s: "false" (a string)' % (where, ISTIO))
        spec = t["spec"]
        if spec.get("securityContext", {}).get("fsGroup") != fs_group:
            fail("%s: securityContext.fsGroup is not %s, the image's group"
                 % (where, fs_group))
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for v in volumes.values():
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                if claim not in claims:
                    fail("%s: volume %s's claim %s is not in the file"
                         % (where, v["name"], claim))
            if "configMap" in v and v["configMap"]["name"] not in config_maps:
                fail("%s: volume %s's ConfigMap %s is not in the file"
                     % (where, v["name"], v["configMap"]["name"]))
        for c in spec["containers"]:
            if c.get("image") != image:
                fail("%s: image %s, not %s (the Dockerfile's)"
                     % (where, c.get("image"), image))
            files = set()
            for m in c.get("volumeMounts", []):
                v = volumes.get(m["name"])
                if v is None:
                    fail("%s: mount of no volume %s" % (where, m["name"]))
                if "configMap" in v:
                    cm = config_maps[v["configMap"]["name"]]
                    files |= {m["mountPath"].rstrip("/") + "/" + k
                              for k in cm.get("data", {})}
            words = " ".join(c.get("command", []) + c.get("args", [])).split()
            flag_files = [words[i + 1] for i, w in enumerate(words[:-1])
                          if w == "--config-file"]
            if not flag_files:
                fail("%s: the container reads no --config-file" % where)
            for f in flag_files:
                if f not in files:
                    fail("%s: --config-file %s is no mounted ConfigMap key "
                         "(%s)" % (where, f, sorted(files)))


class Pod:
    def __init__(self, name, job, container, env, dns, pod_spec, docs):
        self.name, self.job, self.dns = name, job, dns
        # (mount path, volume) of each mount; the ConfigMaps by name.
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        self.mounts = [(m["mountPath"], volumes[m["name"]])
                       for m in container.get("volumeMounts", [])]
        self.config_maps = {d["metadata"]["name"]: d for d in docs
                            if d["kind"] == "ConfigMap"}
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


def tfjob_pods(docs):
    """The pods of a TFJob, TF_CONFIG as the training-operator writes it."""
    jobs = [d for d in docs if d["kind"] == "TFJob"]
    if len(jobs) != 1:
        fail("tfjob-kfac.yaml: expected one TFJob")
    doc = jobs[0]
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
                            "%s.%s.svc" % (pod, ns),
                            spec["template"]["spec"], docs))
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
                            "%s.%s.%s.svc.cluster.local" % (pod, svc, ns),
                            d["spec"]["template"]["spec"], docs))
    return pods


def localise(pods, tmp, cluster_file):
    """The loopback addresses, ports, hosts file and test flags."""
    per_job = make_certs(tmp, pods, cluster_file)
    hosts = os.path.join(tmp, "hosts")
    with open(hosts, "w") as out:
        out.write("127.0.0.1 localhost\n")
        for k, pod in enumerate(pods):
            out.write("127.0.0.%d %s\n" % (k + 2, pod.dns))
    ports = dict(zip((pod.dns for pod in pods), free_ports(len(pods))))
    pattern = re.compile(r"([A-Za-z0-9.-]+):2222\b")

    def port_of(m):
        if m.group(1) not in ports:
            fail("%s:2222 is no pod's DNS name" % m.group(1))
        return "%s:%d" % (m.group(1), ports[m.group(1)])

    for pod in pods:
        for key in list(pod.env):
            pod.env[key] = pattern.sub(port_of, pod.env[key])
        # The volumes: a claim's directory shared, a ConfigMap's per pod
        # with its flag files made local; their mount paths replaced.
        for path, volume in pod.mounts:
            if "persistentVolumeClaim" in volume:
                local = os.path.join(
                    tmp, "claim-" + volume["persistentVolumeClaim"]["claimName"])
            elif "configMap" in volume:
                local = os.path.join(tmp, pod.name + "-" + volume["name"])
                cm = pod.config_maps[volume["configMap"]["name"]]
                os.makedirs(local, exist_ok=True)
                for key, text in cm.get("data", {}).items():
                    settings = dict(NODE_SETTINGS)
                    if pod.job == "evaluator":
                        settings = dict(EVAL_SETTINGS)
                        settings["metrics"] = os.path.join(tmp, "eval.jsonl")
                    settings["tls_dir"] = os.path.join(per_job, pod.job)
                    with open(os.path.join(local, key), "w") as out:
                        out.write(local_flag_file(text, settings))
            elif "secret" in volume:
                # The certificates' Secret: owner-only, as defaultMode 0400.
                if volume["secret"].get("defaultMode") != 0o400:
                    fail("%s: Secret volume %s is not defaultMode 0400 (the "
                         "node refuses a key others may read)"
                         % (pod.name, volume["name"]))
                # Each job's own Secret: a worker's pod never holds the
                # chief's or a shard's key.
                secret = volume["secret"].get("secretName", "")
                if not secret.endswith("-tls-" + pod.job):
                    fail("%s: Secret %s is not its job's (NAME-tls-%s): "
                         "a pod must hold only its own job's keys"
                         % (pod.name, secret, pod.job))
                local = os.path.join(per_job, pod.job)
            else:
                fail("%s: volume %s is neither a claim, a ConfigMap nor a "
                     "Secret" % (pod.name, volume["name"]))
            os.makedirs(local, exist_ok=True)
            pod.command = [w.replace(path, local) for w in pod.command]
            for key in list(pod.env):
                pod.env[key] = pod.env[key].replace(path, local)
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


def run(pods, bin_dir, tmp, what, cluster_file):
    hosts = localise(pods, tmp, cluster_file)
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
            print("%s: %s (%s) exited 0" % (what, pod.name, pod.job))
    finally:
        for pod in pods:
            if pod.proc is not None and pod.proc.poll() is None:
                pod.proc.kill()
                pod.proc.wait()
    summaries = [os.path.join(tmp, d, "summary.json") for d in os.listdir(tmp)
                 if d.startswith("claim-")]
    summaries = [f for f in summaries if os.path.exists(f)]
    if len(summaries) != 1:
        fail("%s: no summary.json of the chief on the claim's volume"
             % what)
    with open(summaries[0]) as f:
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
    if len(sys.argv) != 5:
        print(__doc__)
        sys.exit(2)
    bin_dir, manifests = os.path.abspath(sys.argv[1]), sys.argv[2]
    image, dockerfile = sys.argv[3], sys.argv[4]
    for program in ("convnet_mnist_distributed", "syncfac_evaluator"):
        if not os.access(os.path.join(bin_dir, program), os.X_OK):
            fail("no %s in %s (build it)" % (program, bin_dir))
    if subprocess.run(["unshare", "-m", "true"],
                      stderr=subprocess.DEVNULL).returncode != 0:
        fail("'unshare -m' is not permitted here (root or CAP_SYS_ADMIN, "
             "as scripts/test.sh has): no private /etc/hosts for the pods' "
             "names")
    with open(dockerfile) as f:
        text = f.read()
    if "-t %s " % image not in text:
        fail("%s does not say it builds the image %s" % (dockerfile, image))
    users = re.findall(r"^USER (\d+):(\d+)$", text, re.M)
    if not users:
        fail("%s sets no USER uid:gid" % dockerfile)
    fs_group = int(users[-1][1])
    with open(os.path.join(manifests, "tfjob-kfac.yaml")) as f:
        tfjob = [d for d in yaml.safe_load_all(f) if d]
    with open(os.path.join(manifests, "statefulset-kfac.yaml")) as f:
        sts = [d for d in yaml.safe_load_all(f) if d]
    check_manifest(tfjob, "tfjob-kfac.yaml", image, fs_group)
    check_manifest(sts, "statefulset-kfac.yaml", image, fs_group)
    print("both manifests: claims, ConfigMaps, image %s, the Istio "
          "annotation, fsGroup %d" % (image, fs_group))
    with tempfile.TemporaryDirectory() as tmp:
        run(tfjob_pods(tfjob), bin_dir, tmp, "TFJob",
            os.path.join(manifests, "tfjob-kfac.cluster.json"))
    with tempfile.TemporaryDirectory() as tmp:
        run(statefulset_pods(sts), bin_dir, tmp, "StatefulSet",
            os.path.join(manifests, "statefulset-kfac.cluster.json"))
    print("every pod of both manifests ended well")


if __name__ == "__main__":
    main()
