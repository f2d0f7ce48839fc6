# The seeds' ConvNet with synchronous K-FAC on Fashion-MNIST (Debian's
# dataset-fashion-mnist) as a cluster of processes, from Python
# (docs/python.md, "Clusters"). The same script, two ways:
#
#   # syncfac.launch: this process starts the chief, 2 workers and a PS
#   # shard as node programs on loopback and gets the chief's summary
#   PYTHONPATH=build/python /usr/bin/python3 examples/python/cluster_run.py launch
#
#   # syncfac.node: every process runs one task in itself, the task taken
#   # from the launcher's environment: mpirun's rank (--layout chief=1,ps=1:
#   # rank 0 the chief, 1 the PS shard, the rest workers) ...
#   mpirun -n 4 -x PYTHONPATH=build/python /usr/bin/python3 \
#       examples/python/cluster_run.py node
#   # ... or srun's (srun -n 4 ...), or Kubeflow's TF_CONFIG in each pod:
#   TF_CONFIG='{"cluster": {"chief": ["localhost:25000"], "ps": ["localhost:25001"],
#     "worker": ["localhost:25002", "localhost:25003"]},
#     "task": {"type": "worker", "index": 0}}' /usr/bin/python3 cluster_run.py node

import gzip
import socket
import sys

import numpy as np
import syncfac


def idx(path, offset):  # Debian's dataset-fashion-mnist, gzipped IDX
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


d = "/usr/share/datasets/fashion-mnist/"
x = idx(d + "train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
y = idx(d + "train-labels-idx1-ubyte.gz", 8)
xt = idx(d + "t10k-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
yt = idx(d + "t10k-labels-idx1-ubyte.gz", 8)

model = syncfac.Sequential([
    syncfac.conv2d(16, 5, padding="same"), syncfac.relu(),
    syncfac.max_pool(3, 2, padding="same"),
    syncfac.conv2d(16, 5, padding="same", activation="relu"),
    syncfac.max_pool(3, 2, padding="same"),
    syncfac.flatten(), syncfac.dense(10)],
    input_shape=(28, 28, 1), name="seeds_convnet")
# Every task of the cluster must train with the same settings: the chief
# refuses a node whose differ (syncfac.ConfigError / ClusterError naming
# the field and both values).
settings = dict(optimizer="kfac", learning_rate=0.0003, init="glorot",
                steps=400, log_every=100, no_progress=True)


def free_ports(count):
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


mode = sys.argv[1] if len(sys.argv) > 1 else "launch"
if mode == "launch":
    p = free_ports(4)
    cluster = {"cluster": {"chief": ["localhost:%d" % p[0]],
                           "worker": ["localhost:%d" % p[1],
                                      "localhost:%d" % p[2]],
                           "ps": ["localhost:%d" % p[3]]}}
    summary = syncfac.launch(cluster, model, (x, y), test=(xt, yt),
                             **settings)
    print("test accuracy", summary["test_accuracy"], "exit codes",
          summary["exit_codes"])
elif mode == "node":
    outcome = syncfac.node(model, (x, y), test=(xt, yt),
                           layout="chief=1,ps=1", **settings)
    if "test_accuracy" in outcome:  # the chief's task: the run's summary
        print("test accuracy", outcome["test_accuracy"])
    else:
        print(outcome["task"], "done, exit code", outcome["exit_code"])
else:
    sys.exit("usage: cluster_run.py launch|node")
