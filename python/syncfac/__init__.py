"""syncfac: synchronous data-parallel training with K-FAC, from Python.

The module drives syncfac's C++ runtime in this process (docs/python.md):

    import numpy as np, syncfac
    model = syncfac.Sequential([
        syncfac.conv2d(16, 5, padding="same"), syncfac.relu(),
        syncfac.max_pool(3, 2, padding="same"),
        syncfac.flatten(), syncfac.dense(10)], input_shape=(28, 28, 1))
    summary = syncfac.train(model, (x, y), test=(xt, yt), optimizer="kfac",
                            workers=3, replicas_to_aggregate=2, steps=400)
    print(summary["test_accuracy"], summary["params_digest"])
"""

import json as _json
import os as _os

from . import _core
from ._core import (
    ConfigError,
    CopyWarning,
    DataError,
    Error,
    FileError,
    Layer,
    Model,
    conv2d,
    dense,
    embedding_bag,
    flatten,
    max_pool,
    relu,
    sigmoid,
    tanh,
)

__all__ = [
    "ConfigError", "CopyWarning", "DataError", "Error", "FileError", "Layer",
    "Model", "Sequential", "conv2d", "data_info", "dense", "embedding_bag",
    "evaluate", "fake_data", "flags_help", "flatten", "load_checkpoint",
    "load_model", "max_pool", "predict", "relu", "sigmoid", "tanh", "train",
    "training_now",
]

# The flags syncfac.train takes from its own arguments, or that belong to
# a command line only: given through **flags they are refused by name.
_NOT_FLAGS = {
    "data": "the training data are the arrays given as data=(x, y)",
    "data_dir": "the training data are the arrays given as data=(x, y)",
    "fake_data": "give syncfac.fake_data()'s arrays as data=(x, y)",
    "use_fake_data": "give syncfac.fake_data()'s arrays as data=(x, y)",
    "fake_train_size": "give syncfac.fake_data()'s arrays as data=(x, y)",
    "fake_test_size": "give syncfac.fake_data()'s arrays as test=(x, y)",
    "model": "the model is train()'s first argument",
    "model_file": "the model is train()'s first argument (syncfac.load_model)",
    "mlp_hidden": "the model is train()'s first argument",
    "worker_replicas": "its name here is workers=",
    "help": "syncfac.flags_help() gives the text",
    "version": "it prints, it does not train",
    "requeue_signal": "train() in Python watches no signals (docs/python.md)",
}


def Sequential(layers, input_shape, name="model", init="",
               loss="softmax_cross_entropy"):
    """A model of `layers` (syncfac.conv2d(), relu(), ...) on examples of
    `input_shape` ([H, W, C], [H, W] or [D]), checked as a model file is:
    a bad one raises syncfac.ConfigError naming the layer."""
    return _core.sequential(list(layers), [int(d) for d in input_shape],
                            name, init, loss)


def load_model(source):
    """A model from a file (a path or os.PathLike) or from JSON text (a
    str beginning with '{'), in the model file's format (docs/models.md);
    checked as convnet_mnist_single's --model_file is."""
    if isinstance(source, str) and source.lstrip().startswith("{"):
        return _core.load_model_text(source, "model")
    return _core.load_model_file(_os.fspath(source))


def fake_data(count, seed):
    """The runtime's synthetic Fashion-MNIST stand-in (--fake_data): `count`
    28x28 uint8 images and their labels in 0..9, the same bytes for the
    same (count, seed) on every machine."""
    return _core.fake_data(int(count), int(seed))


def load_checkpoint(directory):
    """The newest good checkpoint of a run's checkpoint_dir (docs/
    checkpoints.md) as a dict: "params" (variable name, e.g. "fc4/weights",
    to a float32 array), "global_step", "path", "params_digest" (the
    summary's digest of these values) and "skipped" (files passed over,
    and why). A directory without one raises syncfac.FileError; one whose
    checkpoints are all corrupt, syncfac.DataError."""
    return _core.load_checkpoint(_os.fspath(directory))


def _params_of(params):
    # load_checkpoint()'s whole dict, or its "params".
    if isinstance(params, dict) and isinstance(params.get("params"), dict):
        return params["params"]
    return params


def evaluate(model, params, data, batch_size=1000, threads=0):
    """The mean loss and accuracy of `model` with `params` (a dict of
    arrays by variable name, as load_checkpoint() gives) on data=(x, y),
    checked as train() checks data: {"examples", "loss", "accuracy"}.
    threads: CPU threads (0: the CPU share)."""
    return _core.evaluate(model, _params_of(params), data, int(batch_size),
                          int(threads))


def predict(model, params, x, batch_size=1000, threads=0):
    """The predictive distribution of `model` with `params` for inputs x:
    softmax probabilities [N, classes] (an autoencoder's: the Bernoulli
    means [N, D]) as a float32 array."""
    return _core.predict(model, _params_of(params), x, int(batch_size),
                         int(threads))


def flags_help():
    """Every flag train() takes, with its default and range, as
    convnet_mnist_single --help prints them."""
    return _core.flags_help()


def training_now():
    """Whether a train() of this process is running."""
    return _core.training_now()


def _refused(message):
    err = ConfigError(message)
    err.code = "invalid_argument"
    return err


def _flag_words(flags, check):
    words = []
    for name, value in flags.items():
        if check and name in _NOT_FLAGS:
            raise _refused("syncfac.train: '%s' is not taken here (%s)"
                           % (name, _NOT_FLAGS[name]))
        if value is None or value is False:
            continue
        if value is True:
            words.append("--" + name)
        elif isinstance(value, (list, tuple)):
            words += ["--" + name, ",".join(str(v) for v in value)]
        elif isinstance(value, float):
            words += ["--" + name, repr(value)]
        else:
            words += ["--" + name, _os.fspath(value)
                      if isinstance(value, _os.PathLike) else str(value)]
    return words


def train(model, data, *, test=None, optimizer=None, workers=None,
          replicas_to_aggregate=None, ps_tasks=None, steps=None, seed=None,
          learning_rate=None, batch_size=None, checkpoint_dir=None,
          logdir=None, callback=None, **flags):
    """Trains `model` on data=(x, y) through the synchronous-replica runtime
    in this process and returns the run's summary as a dict (the keys of
    convnet_mnist_single's --summary file: params_digest, test_accuracy,
    global_step, ...; "arrays" says where the training inputs were read).

    x: [N, D], [N, H, W] or [N, H, W, C], float32 or integer pixels
    (0..255); y: [N] integer labels. C-contiguous float32 or uint8 inputs
    are read in place (do not change them while it runs); anything else is
    converted once, with a syncfac.CopyWarning. test=(x, y) is evaluated
    at the end. Every other keyword is a flag of convnet_mnist_single
    (syncfac.flags_help()): kfac's damping=..., invert_every=..., and so
    on; workers= is --worker_replicas. Errors raise syncfac.ConfigError,
    DataError, FileError (all syncfac.Error) with the runtime's message.
    One run at a time per process; the GIL is released while it trains.
    callback(metrics) is called with every metrics line (a dict: "step",
    "wall_s", "loss", "train_accuracy", ...; evaluations' "test_accuracy"); a
    true answer ends the run after the global step in flight (checkpointed
    with checkpoint_dir; "preempted": "callback"), an exception does too
    and is raised when the run has ended. Called on the main thread, the run takes SIGINT, SIGTERM and SIGHUP
    while it lasts, as convnet_mnist_single does: the first ends it after
    the global step in flight, checkpointed with checkpoint_dir (the
    summary's "preempted" names the signal; Ctrl-C raises
    KeyboardInterrupt with the summary in .summary), a second ends the
    process.
    """
    named = dict(optimizer=optimizer, worker_replicas=workers,
                 replicas_to_aggregate=replicas_to_aggregate,
                 ps_tasks=ps_tasks, steps=steps, seed=seed,
                 learning_rate=learning_rate, batch_size=batch_size,
                 checkpoint_dir=checkpoint_dir, logdir=logdir)
    words = _flag_words(named, check=False) + _flag_words(flags, check=True)
    if not isinstance(model, Model):
        raise _refused("syncfac.train: the model must be a syncfac.Model "
                       "(Sequential or load_model), got %s"
                       % type(model).__name__)
    if callback is not None and not callable(callback):
        raise _refused("syncfac.train: callback must be callable, got %s"
                       % type(callback).__name__)
    summary = _json.loads(_core.train(model, data, test, words, callback))
    if "SIGINT" in summary.get("preempted", ""):
        # Ctrl-C: the run ended after its step in flight (checkpointed
        # with checkpoint_dir); Python's way to say so, summary attached.
        interrupt = KeyboardInterrupt(summary["preempted_line"])
        interrupt.summary = summary
        raise interrupt
    return summary


def data_info(model, data):
    """The runtime's view of data=(x, y) for `model`, checked as train()
    checks it: count, height, width, channels, num_classes, float_inputs,
    digest, and where the examples are (examples_address; borrowed: read
    in place from the array)."""
    return _json.loads(_core.data_info(model, data))
