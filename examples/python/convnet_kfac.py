# The seeds' ConvNet with synchronous K-FAC on Fashion-MNIST (Debian's
# dataset-fashion-mnist) from Python: 3 workers, R = 2, one PS shard,
# in this process (docs/python.md):
#
#   PYTHONPATH=build/python /usr/bin/python3 examples/python/convnet_kfac.py

import gzip, numpy as np, syncfac

def idx(path, offset):           # Debian's dataset-fashion-mnist, gzipped IDX
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
summary = syncfac.train(model, (x, y), test=(xt, yt), optimizer="kfac",
                        workers=3, replicas_to_aggregate=2, ps_tasks=1,
                        learning_rate=0.0003, init="glorot", steps=400)
print(summary["test_accuracy"], summary["params_digest"])
