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
import os
import sys

import numpy as np
import syncfac


def fashion_mnist(split):
    # One split of Debian's dataset-fashion-mnist ("train" or "t10k"):
    # uint8 images [N, 28, 28] (read in place by the runtime) and labels.
    prefix = "/usr/share/datasets/fashion-mnist/" + split
    with gzip.open(prefix + "-images-idx3-ubyte.gz") as images, \
            gzip.open(prefix + "-labels-idx1-ubyte.gz") as labels:
        return (np.frombuffer(images.read(), np.uint8, offset=16)
                .reshape(-1, 28, 28),
                np.frombuffer(labels.read(), np.uint8, offset=8))


train, test = fashion_mnist("train"), fashion_mnist("t10k")
# The seeds' ConvNet as the built-in model file describes it (the one
# examples/python/convnet_kfac.py builds layer by layer).
here = os.path.dirname(os.path.abspath(__file__))
model = syncfac.load_model(os.path.join(here, "..", "models",
                                        "seeds_convnet.json"))
# Every task of the cluster must train with the same settings: the chief
# refuses a node whose differ (syncfac.ConfigError / ClusterError naming
# the field and both values).
settings = dict(optimizer="kfac", learning_rate=0.0003, init="glorot",
                steps=400, log_every=100, no_progress=True)


# Free loopback ports below the kernel's ephemeral range, where no outgoing
# connection takes one before its task listens (scripts/free_ports.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts"))
from free_ports import free_ports  # noqa: E402


mode = sys.argv[1] if len(sys.argv) > 1 else "launch"
if mode == "launch":
    p = free_ports(4)
    cluster = {"cluster": {"chief": ["localhost:%d" % p[0]],
                           "worker": ["localhost:%d" % p[1],
                                      "localhost:%d" % p[2]],
                           "ps": ["localhost:%d" % p[3]]}}
    summary = syncfac.launch(cluster, model, train, test=test, **settings)
    print("test accuracy", summary["test_accuracy"], "exit codes",
          summary["exit_codes"])
elif mode == "node":
    outcome = syncfac.node(model, train, test=test, layout="chief=1,ps=1",
                           **settings)
    if "test_accuracy" in outcome:  # the chief's task: the run's summary
        print("test accuracy", outcome["test_accuracy"])
    else:
        print(outcome["task"], "done, exit code", outcome["exit_code"])
else:
    sys.exit("usage: cluster_run.py launch|node")
