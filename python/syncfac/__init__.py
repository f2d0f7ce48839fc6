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
import re as _re
import shutil as _shutil
import tempfile as _tempfile
import warnings as _warnings

from . import _core
from ._core import (
    ClusterError,
    ConfigError,
    CopyWarning,
    DataError,
    Error,
    FileError,
    Layer,
    Model,
    add,
    avg_pool,
    batch_norm,
    concat,
    conv2d,
    dense,
    dropout,
    embedding_bag,
    flatten,
    global_avg_pool,
    max_pool,
    relu,
    sigmoid,
    tanh,
)

__all__ = [
    "ClusterError", "ConfigError", "CopyWarning", "DataError", "Error",
    "FileError", "Layer", "Model", "Sequential", "add", "avg_pool",
    "batch_norm", "concat", "conv2d", "data_info",
    "dense", "dropout", "embedding_bag", "evaluate", "fake_data",
    "flags_help", "flatten", "global_avg_pool", "launch", "load_checkpoint",
    "load_model", "max_pool",
    "node", "node_flags_help", "predict", "relu", "sigmoid", "tanh",
    "train", "training_now",
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


def _flag_words(flags, check, who="syncfac.train", refused=_NOT_FLAGS):
    words = []
    for name, value in flags.items():
        if check and name in refused:
            raise _refused("%s: '%s' is not taken here (%s)"
                           % (who, name, refused[name]))
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


# --- clusters (docs/python.md, "Clusters") -----------------------------------

# The node program's flags that launch() and node() take from their own
# arguments, or that belong to a command line only.
_NOT_NODE_FLAGS = dict(
    _NOT_FLAGS,
    cluster="the cluster is an argument of its own",
    job_name="node() takes it as job_name=; launch() starts every task",
    task="node() takes it as task=; launch() starts every task",
    print_cluster="it prints, it does not train (convnet_mnist_distributed "
                  "--print_cluster)",
)
# The node program watches the scheduler's signals: requeue_signal= is its.
del _NOT_NODE_FLAGS["requeue_signal"]

# The node program convnet_mnist_distributed: where launch() looks for it.
_NODE_PROGRAM = "convnet_mnist_distributed"


def _named_words(who, optimizer, workers, replicas_to_aggregate, ps_tasks,
                 steps, seed, learning_rate, batch_size, checkpoint_dir,
                 logdir, flags):
    named = dict(optimizer=optimizer, worker_replicas=workers,
                 replicas_to_aggregate=replicas_to_aggregate,
                 ps_tasks=ps_tasks, steps=steps, seed=seed,
                 learning_rate=learning_rate, batch_size=batch_size,
                 checkpoint_dir=checkpoint_dir, logdir=logdir)
    return (_flag_words(named, check=False)
            + _flag_words(flags, check=True, who=who,
                          refused=_NOT_NODE_FLAGS))


def _cluster_text(cluster, who):
    # A dict in TF_CONFIG's shape as the JSON text of a cluster file,
    # checked as the launcher checks a file.
    if not isinstance(cluster, dict):
        raise _refused("%s: the cluster must be a dict in TF_CONFIG's shape "
                       "({\"cluster\": {\"chief\": [\"localhost:2222\"], ...}})"
                       " or the path of a cluster file, got %s"
                       % (who, type(cluster).__name__))
    try:
        text = _json.dumps(cluster)
    except (TypeError, ValueError) as err:
        raise _refused("%s: the cluster dict is not JSON: %s" % (who, err))
    _core.cluster_tasks(text, "cluster dict")
    return text


def _write_cluster(cluster, directory, who):
    # The path of the cluster file every task reads.
    if isinstance(cluster, (str, _os.PathLike)):
        return _os.fspath(cluster)
    path = _os.path.join(directory, "cluster.json")
    with open(path, "w") as out:
        out.write(_cluster_text(cluster, who))
    return path


def _node_program(program):
    # program= as the launcher's --program takes it; else the node program
    # in the nearest bin/ above this package (build/python/syncfac ->
    # build/bin; PREFIX/lib/python3.X/dist-packages/syncfac -> PREFIX/bin),
    # else on PATH.
    if program is not None:
        return _os.fspath(program)
    here = _os.path.dirname(_os.path.abspath(__file__))
    for _ in range(5):
        here = _os.path.dirname(here)
        candidate = _os.path.join(here, "bin", _NODE_PROGRAM)
        if _os.access(candidate, _os.X_OK):
            return candidate
    found = _shutil.which(_NODE_PROGRAM)
    if found:
        return found
    err = FileError("syncfac.launch: no node program: %s is neither in a "
                    "bin/ directory above %s nor on PATH (build the target "
                    "%s, or give program=PATH)"
                    % (_NODE_PROGRAM, _os.path.dirname(__file__),
                       _NODE_PROGRAM))
    err.code = "io_error"
    raise err


def _write_inputs(model, data, test, directory):
    # The flags naming the model and the data for the node program: files
    # given by path as they are; a Model and arrays written once into
    # `directory` (the arrays checked here first, as train() checks them).
    words = []
    if isinstance(model, Model):
        path = _os.path.join(directory, "model.json")
        with open(path, "w") as out:
            out.write(model.to_json())
        words += ["--model_file", path]
    elif isinstance(model, (str, _os.PathLike)):
        words += ["--model_file", _os.fspath(model)]
        model = load_model(model)
    else:
        raise _refused("syncfac.launch: the model must be a syncfac.Model "
                       "or the path of a model file, got %s"
                       % type(model).__name__)
    if isinstance(data, (str, _os.PathLike)):
        if test is not None:
            raise _refused("syncfac.launch: with data given as an .npz "
                           "file, its x_test and y_test are the test set "
                           "(test= is for arrays)")
        return words + ["--data", _os.fspath(data)]
    import numpy
    with _warnings.catch_warnings():
        # The arrays are written to a file: no copy to warn about.
        _warnings.simplefilter("ignore", CopyWarning)
        data_info(model, data)
        if test is not None:
            _core.data_info(model, test)
    x, y = data
    xt, yt = test if test is not None else data
    path = _os.path.join(directory, "data.npz")
    numpy.savez(path, x_train=numpy.asarray(x), y_train=numpy.asarray(y),
                x_test=numpy.asarray(xt), y_test=numpy.asarray(yt))
    words += ["--data", path]
    if test is None:
        words.append("--no_final_eval")
    return words


def _task_failed(report, summary):
    # The ClusterError of a run whose chief or another task failed: the
    # chief's last word first (it names who was refused and why).
    tasks = report["tasks"]
    chief = report["chief"]
    failed = [t for t, r in tasks.items() if r["exit_code"] != 0]
    if tasks[chief]["exit_code"] != 0:
        failed.remove(chief)
        failed.insert(0, chief)
    parts = []
    for t in failed:
        r = tasks[t]
        said = r["last_error_line"]
        parts.append("%s %s%s" % (t, r["status"], ": " + said if said else ""))
    if report["exit_code"] == 124:
        parts.insert(0, "max_wall_s ran out")
    if not parts and summary is None:
        parts.append("%s wrote no summary although every task exited 0 "
                     "(does the program take --summary FILE as the node "
                     "program does?)" % chief)
    elif not parts:
        parts.append("the launcher exited with code %d"
                     % report["exit_code"])
    err = ClusterError("syncfac.launch: " + "; ".join(parts))
    first = tasks[failed[0]]["last_error_line"] if failed else ""
    match = _re.match(r"^[^:]+: ([a-z_]+): ", first)
    err.code = match.group(1) if match else "task_failed"
    err.exit_codes = {t: r["exit_code"] for t, r in tasks.items()}
    err.errors = {t: tasks[t]["last_error_line"] for t in failed}
    err.summary = summary
    return err


def launch(cluster, model, data, *, test=None, program=None, job_flags=None,
           grace_ms=None, term_ms=None, max_wall_s=None, task_log_dir=None,
           optimizer=None, workers=None, replicas_to_aggregate=None,
           ps_tasks=None, steps=None, seed=None, learning_rate=None,
           batch_size=None, checkpoint_dir=None, logdir=None, **flags):
    """Starts every task of `cluster` as its own process of the node
    program (convnet_mnist_distributed) through the project's launcher
    (syncfac-launch's code, in this process), waits for the run to end and
    returns the chief's summary as a dict, with "exit_codes" (every task's
    exit code, by "job:index").

    cluster: a dict in TF_CONFIG's shape or the path of a cluster file.
    model: a syncfac.Model or the path of a model file. data=(x, y) arrays
    (test=(x, y) evaluated at the end), checked as train() checks them and
    handed to the tasks as one .npz file, or the path of an .npz file.
    Every other keyword is a flag of the node program, as train() takes
    them (workers= and ps_tasks= must agree with the cluster); job_flags=
    {"worker": {"threads": 2}} adds flags for one job's tasks. Launcher
    settings: program= (default: the node program of this build or
    install, else on PATH), grace_ms=, term_ms=, max_wall_s=,
    task_log_dir= (docs/cluster.md).

    The tasks' lines go to sys.stdout and sys.stderr with their prefixes.
    A failed or refused task raises syncfac.ClusterError with its last
    word (a refusal names the field and both values), .exit_codes,
    .errors and .summary. Called on the main thread, SIGINT, SIGTERM and
    SIGHUP are forwarded to every task as the launcher forwards them:
    Ctrl-C raises KeyboardInterrupt (.summary, .exit_codes) once the run
    has stopped after its global step in flight (checkpointed with
    checkpoint_dir); after SIGTERM the summary names it in "preempted".
    """
    who = "syncfac.launch"
    words = _named_words(who, optimizer, workers, replicas_to_aggregate,
                         ps_tasks, steps, seed, learning_rate, batch_size,
                         checkpoint_dir, logdir, flags)
    if test is None and "--eval_every" in words:
        raise _refused("syncfac.launch: eval_every: evaluations need a "
                       "test set (test=(x, y))")
    _core.check_node_flags(words)
    job_words = {}
    for job, extra in (job_flags or {}).items():
        if not isinstance(extra, dict):
            raise _refused("syncfac.launch: job_flags[%r] must be a dict of "
                           "flags, got %s" % (job, type(extra).__name__))
        job_words[job] = words + _flag_words(extra, check=True, who=who,
                                             refused=_NOT_NODE_FLAGS)
        _core.check_node_flags(job_words[job])
    node_program = _node_program(program)
    with _tempfile.TemporaryDirectory(prefix="syncfac-launch-") as tmp:
        cluster_file = _write_cluster(cluster, tmp, who)
        inputs = _write_inputs(model, data, test, tmp)
        summary_file = flags.get("summary")
        if summary_file is None:
            summary_file = _os.path.join(tmp, "summary.json")
            inputs += ["--summary", summary_file]
        summary_file = _os.fspath(summary_file)
        args = ["--cluster", cluster_file, "--program", node_program]
        for name, value in (("--grace_ms", grace_ms), ("--term_ms", term_ms),
                            ("--max_wall_s", max_wall_s),
                            ("--task_log_dir", task_log_dir)):
            if value is not None:
                args += [name, _os.fspath(value)
                         if isinstance(value, _os.PathLike) else str(value)]
        for job, own in job_words.items():
            own = own + inputs
            spaced = [w for w in own if not w or any(c.isspace() for c in w)]
            if spaced:
                raise _refused("syncfac.launch: job_flags[%r]: the flag "
                               "value %r holds white space (the launcher "
                               "splits a job's flags at white space)"
                               % (job, spaced[0]))
            args += ["--job_flags", "%s=%s" % (job, " ".join(own))]
        args += ["--"] + words + inputs
        if _os.path.exists(summary_file):
            _os.remove(summary_file)  # a summary of an earlier run says nothing
        report = _json.loads(_core.launch(args))
        summary = None
        if _os.path.exists(summary_file):
            with open(summary_file) as f:
                summary = _json.load(f)
    exit_codes = {t: r["exit_code"] for t, r in report["tasks"].items()}
    if summary is not None:
        summary["exit_codes"] = exit_codes
    signal = report["forwarded_signal"]
    chief = report["chief"]
    if signal:
        if exit_codes[chief] == 143:
            resume = report["resume_step"]
            line = "preempted (%s) at global step %s; %s" % (
                signal,
                summary["global_step"] if summary else report["chief_step"],
                ("the chief's newest checkpoint is at global step %d: "
                 "launch() with the same arguments resumes there" % resume)
                if resume >= 0 else
                "no checkpoint (checkpoint_dir): a run launched again "
                "starts at global step 0")
            if summary is not None:
                summary["preempted_line"] = line
        else:  # e.g. a second signal, which kills every task at once
            line = "interrupted (%s): %s %s" % (
                signal, chief, report["tasks"][chief]["status"])
        if signal == "SIGINT":
            interrupt = KeyboardInterrupt(line)
            interrupt.summary = summary
            interrupt.exit_codes = exit_codes
            raise interrupt
        if summary is not None and exit_codes[chief] == 143:
            return summary
    if report["exit_code"] != 0 or any(exit_codes.values()) \
            or summary is None:
        raise _task_failed(report, summary)
    return summary


def _task_words(cluster, job_name, task, directory):
    # --cluster, --job_name and --task of node()'s arguments.
    words = []
    if cluster is not None:
        words += ["--cluster", _write_cluster(cluster, directory,
                                              "syncfac.node")]
    if isinstance(task, str):
        job, sep, index = task.partition(":")
        if not sep or not index.isdigit() or (job_name not in (None, job)):
            raise _refused("syncfac.node: task %r: expected an index with "
                           "job_name=, or \"job:index\" such as \"worker:1\""
                           % task)
        job_name, task = job, int(index)
    if job_name is not None:
        words += ["--job_name", str(job_name)]
    if task is not None:
        if isinstance(task, bool) or not isinstance(task, int):
            raise _refused("syncfac.node: task must be an index (int) or "
                           "\"job:index\", got %r" % (task,))
        words += ["--task", str(task)]
    return words


def node(model, data, *, test=None, cluster=None, job_name=None, task=None,
         optimizer=None, workers=None, replicas_to_aggregate=None,
         ps_tasks=None, steps=None, seed=None, learning_rate=None,
         batch_size=None, checkpoint_dir=None, logdir=None, **flags):
    """Runs ONE task of a cluster in this process, as the node program
    convnet_mnist_distributed does (the same flags and code; the actors in
    this process, the GIL released), until the run is over.

    The task: cluster= (a dict in TF_CONFIG's shape or the path of a
    cluster file) with job_name= and task= (an index, or "worker:1"), or
    else, as the node program takes it, the TF_CONFIG environment variable
    (Kubeflow), srun's SLURM_PROCID (with layout=, port_base=) or mpirun's
    OMPI_COMM_WORLD_RANK, PMI_RANK or PMIX_RANK (with layout=, hosts=), so
    that `srun python train.py` and `mpirun -n 3 python train.py` run one
    task per process (docs/distributed.md). model, data=(x, y), test= and
    the other keywords are train()'s; every process of the cluster must
    give the same ones (the chief refuses a node whose configuration
    differs: syncfac.ConfigError naming the field and both values).

    Returns the summary dict on the chief's task (with "task"), and
    elsewhere the task's outcome: {"task", "chief": False, "exit_code"}.
    Called on the main thread, the run takes SIGINT, SIGTERM and SIGHUP
    (and requeue_signal=) as the node program does; Ctrl-C raises
    KeyboardInterrupt with .summary (the chief) or .outcome.
    """
    who = "syncfac.node"
    words = _named_words(who, optimizer, workers, replicas_to_aggregate,
                         ps_tasks, steps, seed, learning_rate, batch_size,
                         checkpoint_dir, logdir, flags)
    if not isinstance(model, Model):
        raise _refused("syncfac.node: the model must be a syncfac.Model "
                       "(Sequential or load_model), got %s"
                       % type(model).__name__)
    with _tempfile.TemporaryDirectory(prefix="syncfac-node-") as tmp:
        words = _task_words(cluster, job_name, task, tmp) + words
        outcome = _json.loads(_core.node(model, data, test, words))
    summary = outcome.pop("summary", None)
    if summary is not None:
        summary["task"] = outcome["task"]
    if outcome["signal"] == "SIGINT":
        interrupt = KeyboardInterrupt(
            summary["preempted_line"] if summary and "preempted_line"
            in summary else "%s stopped by SIGINT" % outcome["task"])
        interrupt.summary = summary
        interrupt.outcome = outcome
        raise interrupt
    return summary if summary is not None else outcome


def node_flags_help():
    """Every flag node() and launch() take, with its default and range,
    as convnet_mnist_distributed --help prints them."""
    return _core.node_flags_help()
