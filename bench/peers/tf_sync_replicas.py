#!/usr/bin/env python3
"""TensorFlow's own SyncReplicasOptimizer on the seeds' ConvNet: one task of a loopback cluster.

The system syncfac follows (docs/design.md): tf.compat.v1's graph mode, a
parameter server holding the variables and the token and gradient queues,
N workers over gRPC, worker 0 the chief (it also runs the queue runner
that aggregates R gradients per global step and hands out the tokens).
One process per task, as syncfac's loopback cluster runs one per role:

  tf_sync_replicas.py --job ps --task 0 --ps_hosts H:P --worker_hosts H:P1,H:P2 ...
  tf_sync_replicas.py --job worker --task 1 ...
  tf_sync_replicas.py --job worker --task 0 ...      # the chief; prints the figures

The model and data are syncfac's convnet_mnist_single's (examples/models/
seeds_convnet.json, TF's own SAME padding; init `seeds`: conv kernels
N(0, 0.01^2), dense weights N(0, 1), biases 0), momentum SGD
(tf.compat.v1.train.MomentumOptimizer) wrapped in
SyncReplicasOptimizer(replicas_to_aggregate=R, total_num_replicas=N), R
tokens at start as syncfac's default --num_tokens -1. Each worker feeds its
own shuffled epochs of Fashion-MNIST, batch 128.

The chief times the global steps after --warmup and prints
`global_steps_per_s X examples_per_s Y` (Y = X * R * batch: the examples in
the gradients applied) and a `SUMMARY {json}` line, also written to
--summary. Every task stops itself after --max_wall_s (exit 124, naming the
limit): the ps never returns from server.join(), and a worker whose chief
has gone waits on a token that never comes.
"""
import argparse
import json
import math
import os
import sys
import threading
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

import fashion_mnist  # noqa: E402  (bench/peers/, beside this script)

tf1 = tf.compat.v1
DEFAULT_DATA_DIR = fashion_mnist.DEFAULT_DATA_DIR


STARTED = time.monotonic()
# How long closing a session waits for its queue-runner threads (TensorFlow's
# default, 120 s, is spent in full by the chief: its token queue runner is
# blocked in an enqueue that only the close cancels).
STOP_GRACE_S = 5


def note(a, message):
    """A line on stderr of what this task has reached, with the seconds since it started."""
    print(f"tf_sync_replicas: {a.job} {a.task}: {message} ({time.monotonic() - STARTED:.1f} s)",
          file=sys.stderr, flush=True)


def fail(message):
    print(f"tf_sync_replicas: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def hosts(flag, text):
    out = [h for h in (text or "").split(",") if h]
    for h in out:
        host, _, port = h.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            fail(f"--{flag}: {h!r} is not HOST:PORT")
    if not out:
        fail(f"--{flag} is empty")
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--job", choices=["ps", "worker"], required=True)
    p.add_argument("--task", type=int, default=0)
    p.add_argument("--ps_hosts", required=True)
    p.add_argument("--worker_hosts", required=True)
    p.add_argument("--replicas_to_aggregate", type=int, default=0, help="R (0: every worker)")
    p.add_argument("--steps", type=int, default=120, help="global steps, the warm-up included")
    p.add_argument("--warmup", type=int, default=20, help="first global steps left out of the timing")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads of this task")
    p.add_argument("--inter_op_threads", type=int, default=2, help="inter-op threads of this task")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data_dir", default=DEFAULT_DATA_DIR)
    p.add_argument("--max_wall_s", type=float, default=600, help="this task stops itself after it")
    p.add_argument("--summary", default=None, help="the chief writes its JSON summary here")
    a = p.parse_args(argv)
    a.ps = hosts("ps_hosts", a.ps_hosts)
    a.workers = hosts("worker_hosts", a.worker_hosts)
    tasks = len(a.ps) if a.job == "ps" else len(a.workers)
    if not 0 <= a.task < tasks:
        fail(f"--task {a.task} is not a task of job {a.job} (it has {tasks})")
    a.R = a.replicas_to_aggregate or len(a.workers)
    if not 1 <= a.R <= len(a.workers):
        fail(f"--replicas_to_aggregate {a.R} must be between 1 and the {len(a.workers)} workers")
    if not 0 <= a.warmup < a.steps:
        fail(f"--warmup {a.warmup} must be at least 0 and below --steps {a.steps}")
    for name in ("batch", "threads", "inter_op_threads"):
        if getattr(a, name) < 1:
            fail(f"--{name} {getattr(a, name)} must be at least 1")
    if not a.max_wall_s > 0:
        fail(f"--max_wall_s {a.max_wall_s} must be positive")
    return a


def start_watchdog(a):
    def expire():
        print(f"tf_sync_replicas: {a.job} task {a.task} still running after --max_wall_s "
              f"{a.max_wall_s:g} s; stopping", file=sys.stderr, flush=True)
        os._exit(124)
    t = threading.Timer(a.max_wall_s, expire)
    t.daemon = True
    t.start()


def seeds_convnet(x, y):
    """Logits and mean loss of the seeds' ConvNet, variables placed by the caller's device setter."""
    def conv(name, inputs):
        w = tf1.get_variable(f"{name}/kernel", [5, 5, inputs.shape[-1], 16],
                             initializer=tf1.random_normal_initializer(stddev=0.01))
        b = tf1.get_variable(f"{name}/bias", [16], initializer=tf1.zeros_initializer())
        return tf.nn.relu(tf.nn.conv2d(inputs, w, 1, "SAME") + b)
    h = tf.nn.max_pool2d(conv("conv0", x), 3, 2, "SAME")
    h = tf.nn.max_pool2d(conv("conv2", h), 3, 2, "SAME")
    h = tf.reshape(h, [-1, 7 * 7 * 16])
    w = tf1.get_variable("dense/kernel", [7 * 7 * 16, 10],
                         initializer=tf1.random_normal_initializer(stddev=1.0))
    b = tf1.get_variable("dense/bias", [10], initializer=tf1.zeros_initializer())
    logits = tf.matmul(h, w) + b
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


class PromptWorkerSessionCreator(tf1.train.WorkerSessionCreator):
    """A worker's session creator whose wait for the chief's initialisation polls every second.

    TensorFlow's own waits 30 s between checks (SessionManager's
    recovery_wait_secs), which only lengthens the warm-up, never the global
    steps timed; but it would add half a minute to every run of the bench.
    """

    def _get_session_manager(self):
        if self._session_manager is None:
            self._session_manager = tf1.train.SessionManager(
                local_init_op=self._scaffold.local_init_op,
                local_init_feed_dict=self._scaffold.local_init_feed_dict,
                ready_op=self._scaffold.ready_op,
                ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
                graph=tf1.get_default_graph(), recovery_wait_secs=1)
        return self._session_manager


def run_worker(a, server, cluster, config):
    note(a, "loading the data")
    try:
        n, images, labels = fashion_mnist.read_split(a.data_dir, "train")
    except fashion_mnist.BadData as e:
        fail(str(e))
    images = np.frombuffer(images, dtype=np.uint8).reshape(n, 28, 28)
    labels = np.frombuffer(labels, dtype=np.uint8).astype(np.int64)
    if images.shape[0] < a.batch:
        fail(f"--batch {a.batch} is larger than the {images.shape[0]} training examples")
    images = (images.astype(np.float32) / 255.0).reshape(-1, 28, 28, 1)
    is_chief = a.task == 0
    tf1.set_random_seed(a.seed)
    with tf1.device(tf1.train.replica_device_setter(
            worker_device=f"/job:worker/task:{a.task}", cluster=cluster)):
        x = tf1.placeholder(tf.float32, [None, 28, 28, 1])
        y = tf1.placeholder(tf.int64, [None])
        loss = seeds_convnet(x, y)
        global_step = tf1.train.get_or_create_global_step()
        opt = tf1.train.SyncReplicasOptimizer(
            tf1.train.MomentumOptimizer(a.lr, a.momentum),
            replicas_to_aggregate=a.R, total_num_replicas=len(a.workers))
        train_op = opt.minimize(loss, global_step=global_step)
    hooks = [opt.make_session_run_hook(is_chief, num_tokens=-1),
             tf1.train.StopAtStepHook(last_step=a.steps)]
    rng = np.random.default_rng(a.seed * 1000 + a.task)
    order, pos = rng.permutation(images.shape[0]), 0
    losses = []
    t0 = step0 = last = None
    if is_chief:
        session = tf1.train.MonitoredTrainingSession(
            master=server.target, is_chief=True, hooks=hooks, config=config,
            save_checkpoint_secs=None, save_summaries_steps=None, log_step_count_steps=None,
            stop_grace_period_secs=STOP_GRACE_S)
    else:  # what MonitoredTrainingSession makes for a worker, polling every second
        session = tf1.train.MonitoredSession(
            session_creator=PromptWorkerSessionCreator(master=server.target, config=config),
            hooks=hooks, stop_grace_period_secs=STOP_GRACE_S)
    note(a, "session ready")
    with session as sess:
        while not sess.should_stop():
            if pos + a.batch > order.shape[0]:  # a new epoch, reshuffled
                order, pos = rng.permutation(images.shape[0]), 0
            idx = order[pos:pos + a.batch]
            pos += a.batch
            _, step, value = sess.run([train_op, global_step, loss],
                                      feed_dict={x: images[idx], y: labels[idx]})
            losses.append(float(value))
            last = (int(step), time.perf_counter())
            if t0 is None and step >= a.warmup:
                step0, t0 = int(step), last[1]
                note(a, f"global step {step0}: timing")
    note(a, f"stopped at global step {last[0] if last else None}")
    if not is_chief:
        return 0
    if t0 is None or last[0] <= step0:
        fail(f"the chief saw no global step after --warmup {a.warmup} (last {last})")
    rate = (last[0] - step0) / (last[1] - t0)
    window = max(1, min(10, len(losses) // 2))
    summary = {
        "peer": "tf_sync_replicas", "tf": tf.__version__, "workers": len(a.workers),
        "ps": len(a.ps), "replicas_to_aggregate": a.R, "batch": a.batch,
        "threads": a.threads, "inter_op_threads": a.inter_op_threads,
        "timed_global_steps": last[0] - step0, "timed_s": round(last[1] - t0, 4),
        "global_steps_per_s": round(rate, 3),
        "examples_per_s": round(rate * a.R * a.batch, 1),
        "first_loss": round(sum(losses[:window]) / window, 5),
        "last_loss": round(sum(losses[-window:]) / window, 5),
    }
    line = json.dumps(summary)
    print("SUMMARY " + line)
    print(f"global_steps_per_s {summary['global_steps_per_s']} examples_per_s "
          f"{summary['examples_per_s']}", flush=True)
    if a.summary:
        with open(a.summary, "w") as f:
            f.write(line + "\n")
    return 0 if math.isfinite(losses[-1]) else 1


def main(argv=None):
    a = parse_args(argv)
    start_watchdog(a)
    tf1.disable_eager_execution()
    cluster = tf1.train.ClusterSpec({"ps": a.ps, "worker": a.workers})
    config = tf1.ConfigProto(intra_op_parallelism_threads=a.threads,
                             inter_op_parallelism_threads=a.inter_op_threads)
    server = tf1.train.Server(cluster, job_name=a.job, task_index=a.task, config=config)
    note(a, f"serving on {server.target}")
    if a.job == "ps":
        server.join()  # until the bench script or the watchdog ends it
        return 0
    code = run_worker(a, server, cluster, config)
    note(a, "done")
    # Out at once: tearing down a task's gRPC server and TensorFlow's
    # threads takes tens of seconds on a busy machine, and there is nothing
    # left to write (stdout and stderr are flushed).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
