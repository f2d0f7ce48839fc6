# A model of your own, built in Python, on data of your own made by NumPy
# (docs/python.md, "Models" and "Data"): three interleaved spirals in the
# plane, told apart by a small tanh MLP trained with synchronous K-FAC
# (2 workers, one PS shard) in this process; then the trained parameters
# back as arrays, evaluated and used for predictions.
#
#   PYTHONPATH=build/python /usr/bin/python3 examples/python/own_model.py

import tempfile

import numpy as np
import syncfac


def spirals(count, seed):
    # `count` points of 3 spiral arms with noise: float32 [N, 2], labels [N].
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 3, size=count)
    radius = rng.random(count)
    angle = 2 * np.pi * (radius * 1.5 + label / 3) + rng.normal(0, 0.12, count)
    x = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    return x.astype(np.float32), label.astype(np.uint8)


x, y = spirals(6000, seed=1)
xt, yt = spirals(1000, seed=2)

model = syncfac.Sequential(
    [syncfac.flatten(), syncfac.dense(64, activation="tanh"),
     syncfac.dense(64, activation="tanh"),
     syncfac.dense(3)],
    input_shape=(2,), name="spirals_mlp", init="glorot")
print(model, model.layer_names)

with tempfile.TemporaryDirectory() as ckpt:
    summary = syncfac.train(model, (x, y), test=(xt, yt), optimizer="kfac",
                            workers=2, ps_tasks=1, learning_rate=0.01,
                            damping=0.01, batch_size=100, steps=600,
                            log_every=200, checkpoint_dir=ckpt)
    print("test accuracy after %d steps: %.4f (digest %s)"
          % (summary["global_step"], summary["test_accuracy"],
             summary["params_digest"]))
    params = syncfac.load_checkpoint(ckpt)["params"]

print({name: a.shape for name, a in params.items()})
print("evaluated again:", syncfac.evaluate(model, params, (xt, yt)))
probs = syncfac.predict(model, params, np.array([[0.5, 0.0], [-0.3, 0.4]],
                                                np.float32))
print("class probabilities of two points:\n", probs.round(3))
