"""Clusters from Python (docs/python.md, "Clusters"): syncfac.launch
starting every task of a loopback cluster as a process of the node
program through the project's launcher, and syncfac.node running one task
in each of several real python3 processes that find their task as the
node program does (TF_CONFIG, a real mpirun, srun's variables). The
chief's params_digest is the same whichever way the cluster was started,
and the same as syncfac-launch on the command line; a node configured
otherwise is refused naming the field and both values.

Run by CTest as python_cluster (tests/python/CMakeLists.txt) with
PYTHONPATH=build/python, SYNCFAC_BIN=build/bin and SYNCFAC_SOURCE_DIR.
Every wait is bounded (subprocess timeouts, the launcher's --max_wall_s,
the nodes' --connect_timeout_ms) and generous: the machine may be busy.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import syncfac
from interrupted_run import interrupted, logged_step

BIN = os.environ["SYNCFAC_BIN"]
PYTHON = "/usr/bin/python3"

# The smallest K-FAC cluster: the chief (with the covariance and inverse
# actors), one worker, one PS shard. One worker without initial tokens
# (num_tokens=0, tests/examples/process.hpp's deterministic flags): every
# step takes the worker's next batch; K-FAC's statistics every step
# (kfac_cadence exact) but no inverse applied (min_cov_updates beyond the
# run), since inverses reach the shards when ready and a run with them
# depends on timing (tests/examples/fault_digests.cpp, kfac_no_inverses).
STEPS = 20
FLAGS = dict(optimizer="kfac", learning_rate=0.01, min_cov_updates=1000000,
             kfac_cadence="exact", batch_size=32, seed=3, threads=1,
             no_progress=True, num_tokens=0, log_every=10,
             connect_timeout_ms=120000, max_wait_ms=120000)


def cli_words(flags):
    words = []
    for name, value in flags.items():
        words += ["--" + name] if value is True else ["--" + name, str(value)]
    return words


# Ports below the kernel's ephemeral range, never one handed twice in this
# process (scripts/free_ports.py says why).
sys.path.insert(0, os.path.join(os.environ["SYNCFAC_SOURCE_DIR"], "scripts"))
from free_ports import free_ports, free_port_run  # noqa: E402


def kfac_cluster():
    chief, worker, ps = free_ports(3)
    return {"cluster": {"chief": ["localhost:%d" % chief],
                        "worker": ["localhost:%d" % worker],
                        "ps": ["localhost:%d" % ps]}}


def tiny_model():
    return syncfac.Sequential(
        [syncfac.conv2d(4, 3, padding="same"), syncfac.relu(),
         syncfac.max_pool(2), syncfac.flatten(), syncfac.dense(3)],
        input_shape=(8, 8, 1), name="tiny")


def own_data(seed=7):
    rng = np.random.default_rng(seed)
    x = rng.random((256, 8, 8, 1), dtype=np.float32)
    y = rng.integers(0, 3, size=256)
    return (x, y), (x[:64].copy(), y[:64].copy())


@pytest.fixture(scope="module")
def launched():
    """One K-FAC run of the 3-task cluster through syncfac.launch: its
    summary is the reference the other ways of starting it must reach."""
    data, test = own_data()
    return syncfac.launch(kfac_cluster(), tiny_model(), data, test=test,
                          steps=STEPS, max_wall_s=300, **FLAGS)


# --- syncfac.launch ------------------------------------------------------------

def test_launch_runs_a_kfac_cluster_and_returns_the_chiefs_summary(launched):
    s = launched
    assert s["global_step"] == STEPS
    assert s["exit_codes"] == {"chief:0": 0, "worker:0": 0, "ps:0": 0}
    assert s["workers"] == 1 and s["ps_tasks"] == 1
    assert s["kfac"]["strategy"] == "chief_worker"
    assert s["kfac"]["cov_updates"] == STEPS
    assert s["test_examples"] == 64
    assert s["cluster"]["tasks"] == 3
    assert sorted(s["cluster"]["roles"]) == ["covariance:0", "inverse:0",
                                             "ps:0", "worker:0"]
    assert len(s["params_digest"]) == 16


def test_launch_equals_the_command_line_launcher(launched, tmp_path):
    data, test = own_data()
    npz = tmp_path / "own.npz"
    np.savez(npz, x_train=data[0], y_train=data[1], x_test=test[0],
             y_test=test[1])
    model = tmp_path / "tiny.json"
    model.write_text(tiny_model().to_json())
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(kfac_cluster()))
    summary = tmp_path / "summary.json"
    res = subprocess.run(
        [os.path.join(BIN, "syncfac-launch"), "--cluster", str(cluster),
         "--program", os.path.join(BIN, "convnet_mnist_distributed"),
         "--max_wall_s", "300", "--", "--data", str(npz), "--model_file",
         str(model), "--steps", str(STEPS), "--summary", str(summary),
         *cli_words(FLAGS)],
        capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stdout + res.stderr
    cli = json.loads(summary.read_text())
    assert cli["global_step"] == launched["global_step"] == STEPS
    assert cli["params_digest"] == launched["params_digest"]
    assert cli["test_accuracy"] == launched["test_accuracy"]


def test_the_digest_sees_the_run(launched):
    # Another seed through the same path ends elsewhere: the equalities
    # above compare runs, not constants.
    data, test = own_data()
    other = syncfac.launch(kfac_cluster(), tiny_model(), data, test=test,
                           steps=STEPS, max_wall_s=300,
                           **dict(FLAGS, seed=4))
    assert other["global_step"] == STEPS
    assert other["params_digest"] != launched["params_digest"]


def test_a_node_with_another_kfac_setting_is_refused_by_name():
    data, test = own_data()
    with pytest.raises(syncfac.ClusterError) as info:
        syncfac.launch(kfac_cluster(), tiny_model(), data, test=test,
                       steps=STEPS, max_wall_s=300,
                       job_flags={"worker": {"damping": 0.01}}, **FLAGS)
    err = info.value
    text = str(err)
    assert isinstance(err, syncfac.Error)
    assert ("chief:0: refused worker:0 at connect: worker:0 differs from "
            "the chief in optimizer.kfac.damping: 0.01 on worker:0, 0.001 "
            "on the chief") in text
    # The chief's word comes first: it ended the run.
    assert text.startswith("syncfac.launch: chief:0 exited with code 1: ")
    assert err.code == "invalid_config"
    assert err.exit_codes["chief:0"] == 1 and err.exit_codes["worker:0"] == 1
    assert "refused at connect to chief:0" in err.errors["worker:0"]
    assert err.summary is None  # no step ran


def test_launch_refuses_bad_arguments_before_starting_anything(tmp_path):
    data, _ = own_data()
    model = tiny_model()
    cases = [
        (dict(cluster={"cluster": {"chef": ["localhost:1"]}}),
         "unknown job"),
        (dict(cluster={"cluster": {"chief": ["localhost:0"]}}), "port"),
        (dict(cluster=["localhost:1"]),
         "the cluster must be a dict in TF_CONFIG's shape"),
        (dict(cluster=kfac_cluster(), learning_rate=-3.0),
         "--learning_rate -3.0: must be > 0"),
        (dict(cluster=kfac_cluster(), dampin=0.1), "dampin"),
        (dict(cluster=kfac_cluster(), task=1), "'task' is not taken here"),
        (dict(cluster=kfac_cluster(), job_flags={"evaluator": {"seed": 1}}),
         "no job \"evaluator\" in the cluster"),
        (dict(cluster=kfac_cluster(), eval_every=5),
         "evaluations need a test set"),
    ]
    for kwargs, message in cases:
        with pytest.raises(syncfac.ConfigError) as info:
            syncfac.launch(kwargs.pop("cluster"), model, data, steps=2,
                           **kwargs)
        assert message in str(info.value), kwargs
    with pytest.raises(syncfac.FileError) as info:
        syncfac.launch(kfac_cluster(), model, data, steps=2,
                       program=str(tmp_path / "absent"))
    assert "absent" in str(info.value)
    with pytest.raises(syncfac.DataError) as info:
        syncfac.launch(kfac_cluster(), model,
                       (data[0], data[1][:10]), steps=2)
    assert "array 'data[1]': 10 labels for 256 examples" in str(info.value)


def test_sigterm_to_launch_returns_the_preempted_summary(tmp_path):
    # A scheduler's preemption: forwarded as SIGTERM, and launch() returns
    # the summary saying so (exit 143 everywhere) rather than raising.
    ckpt = tmp_path / "ckpt"
    word, out, err = interrupted(
        [PYTHON, "-u", "-c", INTERRUPTED_LAUNCH, json.dumps(kfac_cluster()),
         str(ckpt)], logged_step(5, "[chief:0] "), timeout=300,
        sig=signal.SIGTERM, word="RETURNED")
    returned = json.loads(word[len("RETURNED "):])
    # Every task got the signal; the chief names the first that told it.
    assert returned["preempted"] in ("chief:0: SIGTERM", "worker:0: SIGTERM",
                                     "ps:0: SIGTERM")
    assert returned["exit_codes"] == {"chief:0": 143, "worker:0": 143,
                                      "ps:0": 143}
    step = returned["global_step"]
    assert returned["preempted_line"].startswith(
        "preempted (SIGTERM) at global step %d; " % step)
    assert "got SIGTERM: forwarding it to every task" in err
    assert syncfac.load_checkpoint(ckpt)["global_step"] == step


def test_launch_waits_for_a_run_of_this_process():
    # One run per process: train, node and launch share it.
    fake = syncfac.fake_data(2048, 1)
    model = syncfac.Sequential([syncfac.flatten(), syncfac.dense(10)],
                               input_shape=(28, 28, 1))
    result = {}

    def long_run():
        result["summary"] = syncfac.train(model, fake, steps=20000,
                                          batch_size=32, threads=1,
                                          no_progress=True, log_every=1000)

    worker = threading.Thread(target=long_run)
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while not syncfac.training_now():
            assert time.monotonic() < deadline, "train() did not start in 60 s"
            assert worker.is_alive(), "train() ended before it was seen"
            time.sleep(0.001)
        (x, y), _ = own_data()
        with pytest.raises(syncfac.Error) as info:
            syncfac.launch(kfac_cluster(), tiny_model(), (x, y), steps=2)
        assert "syncfac.launch: another run of this process is in progress" \
            in str(info.value)
        with pytest.raises(syncfac.Error) as info:
            syncfac.node(tiny_model(), (x, y), cluster=kfac_cluster(),
                         task="chief:0", steps=2)
        assert "syncfac.node: another run of this process is in progress" \
            in str(info.value)
    finally:
        worker.join(timeout=300)
    assert not worker.is_alive(), "train() did not end in 300 s"
    assert result["summary"]["global_step"] == 20000


# What the processes a test stops build alike: own_data()'s arrays and a
# one-layer model, whose steps are short.
STOPPED_SETUP = """
import json, sys, numpy as np, syncfac
rng = np.random.default_rng(7)
x = rng.random((256, 8, 8, 1), dtype=np.float32)
y = rng.integers(0, 3, size=256)
model = syncfac.Sequential([syncfac.flatten(), syncfac.dense(3)],
                           input_shape=(8, 8, 1), name="tiny")
"""

INTERRUPTED_LAUNCH = STOPPED_SETUP + """
cluster = json.loads(sys.argv[1])
try:
    summary = syncfac.launch(cluster, model, (x, y), steps=10000000,
                             batch_size=8, threads=1, log_every=1,
                             no_progress=True, checkpoint_dir=sys.argv[2],
                             max_wall_s=300, connect_timeout_ms=120000)
    print("RETURNED", json.dumps(summary))
except KeyboardInterrupt as stop:
    print("INTERRUPTED", stop.summary["global_step"],
          json.dumps(stop.exit_codes), stop)
import signal
print("HANDLER", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""


def test_ctrl_c_stops_a_launched_cluster_checkpointed(tmp_path):
    ckpt = tmp_path / "ckpt"
    word, out, err = interrupted(
        [PYTHON, "-u", "-c", INTERRUPTED_LAUNCH, json.dumps(kfac_cluster()),
         str(ckpt)], logged_step(5, "[chief:0] "), timeout=300)
    _, step, rest = word.split(" ", 2)
    step = int(step)
    assert 5 <= step < 10000000
    codes, line = rest.split("} ", 1)
    # Every task stopped on the forwarded signal: 143, preempted.
    assert json.loads(codes + "}") == {"chief:0": 143, "worker:0": 143,
                                       "ps:0": 143}
    assert line.startswith("preempted (SIGINT) at global step %d; " % step)
    assert "got SIGINT: forwarding it to every task" in err
    assert "HANDLER True" in out
    # Checkpointed at the step it stopped: the chief's end checkpoint.
    assert syncfac.load_checkpoint(ckpt)["global_step"] == step
    assert "the chief's newest checkpoint is at global step %d" % step \
        in line


# --- syncfac.node in separate processes --------------------------------------

NODE = """
import json, os, sys, numpy as np, syncfac
rng = np.random.default_rng(7)
x = rng.random((256, 8, 8, 1), dtype=np.float32)
y = rng.integers(0, 3, size=256)
model = syncfac.Sequential(
    [syncfac.conv2d(4, 3, padding="same"), syncfac.relu(),
     syncfac.max_pool(2), syncfac.flatten(), syncfac.dense(3)],
    input_shape=(8, 8, 1), name="tiny")
flags = json.loads(sys.argv[1])
try:
    out = syncfac.node(model, (x, y), test=(x[:64].copy(), y[:64].copy()),
                       **flags)
    line = "RESULT " + json.dumps(out)
except syncfac.Error as err:
    line = "ERROR %s %s" % (type(err).__name__, err)
# One write: mpirun forwards the ranks' output in the pieces written.
sys.stdout.write(line + "\\n")
"""


def node_flags(**more):
    return json.dumps(dict(FLAGS, steps=STEPS, **more))


def results(outputs):
    """The RESULT or ERROR line of every process, by its task or rank."""
    found = {}
    for key, out in outputs.items():
        lines = [l for l in out.splitlines()
                 if l.startswith(("RESULT ", "ERROR "))]
        assert len(lines) == 1, "%s said: %s" % (key, out)
        found[key] = lines[0]
    return found


def outputs_when_ended(procs, limit_s, what):
    """The outputs of `procs` (key -> Popen, stdout piped) once all have
    exited, all within `limit_s` seconds together; a test failure naming
    the ones still running otherwise (`what`: what they are)."""
    deadline = time.monotonic() + limit_s
    outputs = {}
    for key, proc in procs.items():
        try:
            outputs[key], _ = proc.communicate(
                timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail("waited %s s for %s %s to exit; still running: %s"
                        % (limit_s, what, key,
                           [k for k, p in procs.items() if p.poll() is None]))
    return outputs


def run_nodes(envs, flags, awaited=None):
    """One python3 process per entry of `envs` (extra environment), each
    running NODE with `flags` (one JSON text, or one per entry); the
    outputs of the `awaited` ones (default all, each must exit 0) once
    they have exited, within 300 s. The others are killed then."""
    procs = {}
    for key, env in envs.items():
        procs[key] = subprocess.Popen(
            [PYTHON, "-u", "-c", NODE,
             flags[key] if isinstance(flags, dict) else flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=dict(os.environ, **env))
    try:
        outputs = outputs_when_ended(
            {k: procs[k] for k in awaited or list(procs)}, 300,
            "the node() process of")
        for key, out in outputs.items():
            assert procs[key].returncode == 0, out
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=60)
    return outputs


def tf_config_envs(cluster, tasks):
    return {"%s:%d" % t: {"TF_CONFIG": json.dumps(
        {"cluster": cluster["cluster"], "task": {"type": t[0], "index": t[1]}})}
        for t in tasks}


TASKS = [("chief", 0), ("worker", 0), ("ps", 0)]


def test_node_in_three_processes_under_tf_config(launched):
    outputs = run_nodes(tf_config_envs(kfac_cluster(), TASKS), node_flags())
    found = {k: json.loads(v[len("RESULT "):])
             for k, v in results(outputs).items()}
    chief = found["chief:0"]
    assert chief["task"] == "chief:0"
    assert chief["global_step"] == STEPS
    # The cluster started by hand is the launched one.
    assert chief["params_digest"] == launched["params_digest"]
    assert found["worker:0"] == {"task": "worker:0", "chief": False,
                                 "signal": "", "exit_code": 0}
    assert found["ps:0"]["exit_code"] == 0
    assert "syncfac.node: " in outputs["chief:0"]  # its log on sys.stdout


def test_node_refused_for_another_setting_raises_config_error():
    envs = tf_config_envs(kfac_cluster(), TASKS)
    flags = {key: node_flags(**({"damping": 0.01} if key == "worker:0"
                                else {})) for key in envs}
    # The chief and the worker end at once; the shard waits for a chief
    # that never says hello (max_wait_ms): it is not awaited.
    outputs = run_nodes(envs, flags, awaited=["chief:0", "worker:0"])
    found = results(outputs)
    differs = ("worker:0 differs from the chief in optimizer.kfac.damping: "
               "0.01 on worker:0, 0.001 on the chief")
    assert found["chief:0"].startswith("ERROR ConfigError ")
    assert "chief:0: refused worker:0 at connect: " + differs \
        in found["chief:0"]
    assert found["worker:0"].startswith("ERROR ConfigError ")
    assert "worker:0: refused at connect to chief:0: " + differs \
        in found["worker:0"]


def test_node_under_a_real_mpirun(launched):
    port_base = free_port_run(3)
    flags = node_flags(layout="chief=1,ps=1", port_base=port_base)
    res = subprocess.run(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3",
         "-x", "PYTHONPATH", PYTHON, "-u", "-c", NODE, flags],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = [json.loads(l[len("RESULT "):]) for l in res.stdout.splitlines()
             if l.startswith("RESULT ")]
    assert sorted(l["task"] for l in lines) == ["chief:0", "ps:0",
                                                "worker:0"], res.stdout
    chief = [l for l in lines if l["task"] == "chief:0"][0]
    assert chief["global_step"] == STEPS
    assert chief["params_digest"] == launched["params_digest"]


def test_node_under_sruns_variables(launched):
    # The variables srun gives each task of `srun -n 3` on one node
    # (docs/distributed.md, "Under Slurm"); tests/examples/slurm_cluster.sh
    # runs a real Slurm for the node program.
    port_base = free_port_run(3)
    common = {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "3",
              "SLURM_JOB_NODELIST": "localhost",
              "SLURM_TASKS_PER_NODE": "3"}
    envs = {rank: dict(common, SLURM_PROCID=str(rank),
                       SLURM_LOCALID=str(rank)) for rank in range(3)}
    outputs = run_nodes(envs, node_flags(layout="chief=1,ps=1",
                                         port_base=port_base))
    found = {k: json.loads(v[len("RESULT "):])
             for k, v in results(outputs).items()}
    assert [found[r]["task"] for r in range(3)] == ["chief:0", "ps:0",
                                                    "worker:0"]
    assert found[0]["params_digest"] == launched["params_digest"]


INTERRUPTED_NODE = STOPPED_SETUP + """
try:
    out = syncfac.node(model, (x, y), steps=10000000, batch_size=8,
                       threads=1, log_every=1, no_progress=True,
                       checkpoint_dir=sys.argv[1], connect_timeout_ms=120000,
                       max_wait_ms=120000)
    print("RETURNED", json.dumps(out))
except KeyboardInterrupt as stop:
    print("OUTCOME", json.dumps(stop.outcome))
    print("SUMMARY", json.dumps(stop.summary))
    print("INTERRUPTED", stop)
"""


def test_ctrl_c_to_the_chiefs_node_stops_every_node(tmp_path):
    # Ctrl-C in the chief's process (the node program's stop): the run
    # ends after the global step in flight, checkpointed; the chief's
    # node() raises KeyboardInterrupt with the summary, the others return
    # their outcome with exit code 143.
    envs = tf_config_envs(kfac_cluster(), TASKS)
    ckpt = tmp_path / "ckpt"
    others = {}
    for key in ("worker:0", "ps:0"):
        others[key] = subprocess.Popen(
            [PYTHON, "-u", "-c", INTERRUPTED_NODE, str(ckpt)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=dict(os.environ, **envs[key]))
    try:
        word, out, err = interrupted(
            [PYTHON, "-u", "-c", INTERRUPTED_NODE, str(ckpt)],
            logged_step(5), timeout=300, env=envs["chief:0"])
        outputs = outputs_when_ended(others, 300, "the node() process of")
    finally:
        for proc in others.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=60)
    said = {l.split(" ", 1)[0]: l.split(" ", 1)[1] for l in out.splitlines()
            if l.startswith(("OUTCOME ", "SUMMARY ", "INTERRUPTED "))}
    outcome = json.loads(said["OUTCOME"])
    assert outcome == {"task": "chief:0", "chief": True, "signal": "SIGINT",
                       "exit_code": 143}
    summary = json.loads(said["SUMMARY"])
    line = said["INTERRUPTED"]
    step = summary["global_step"]
    assert summary["preempted"] == "chief:0: SIGINT"
    assert line == ("preempted (chief:0: SIGINT) at global step %d; "
                    "checkpointed into %s: node() with the same arguments "
                    "on every task resumes there" % (step, ckpt))
    assert syncfac.load_checkpoint(ckpt)["global_step"] == step
    for key, text in outputs.items():
        ended = [l for l in text.splitlines() if l.startswith("RETURNED ")]
        assert ended, text
        assert json.loads(ended[0][len("RETURNED "):]) == {
            "task": key, "chief": False, "signal": "", "exit_code": 143}


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(task="worker:5"), syncfac.ConfigError, "worker:5"),
    (dict(job_name="wrker", task=0), syncfac.ConfigError, "wrker"),
    (dict(task="five"), syncfac.ConfigError, "expected an index"),
    (dict(task=1.5), syncfac.ConfigError, "task must be an index"),
    (dict(cluster={"cluster": {"chief": "localhost:1"}}),
     syncfac.ConfigError, "cluster dict"),
    (dict(cluster=7), syncfac.ConfigError,
     "the cluster must be a dict in TF_CONFIG's shape"),
    (dict(print_cluster=True), syncfac.ConfigError,
     "'print_cluster' is not taken here"),
])
def test_node_refuses_bad_arguments(kwargs, error, message):
    (x, y), _ = own_data()
    kwargs.setdefault("cluster", kfac_cluster())
    with pytest.raises(error) as info:
        syncfac.node(tiny_model(), (x, y), steps=2, **kwargs)
    assert message in str(info.value)
    assert not syncfac.training_now()


def test_node_flags_are_the_node_programs():
    text = syncfac.node_flags_help()
    for flag in ("--layout", "--port_base", "--hosts", "--connect_timeout_ms",
                 "--damping", "--learning_rate"):
        assert flag in text
    res = subprocess.run([os.path.join(BIN, "convnet_mnist_distributed"),
                          "--help"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0
    # The same parser: every flag of the program's help, with its default.
    program_flags = [l.split()[0] for l in res.stdout.splitlines()
                     if l.strip().startswith("--")]
    assert program_flags and all(f in text for f in program_flags)


def test_node_without_any_cluster_says_where_one_comes_from(monkeypatch):
    for name in list(os.environ):
        if name == "TF_CONFIG" or name.startswith(("SLURM_", "OMPI_",
                                                   "PMI_", "PMIX_")):
            monkeypatch.delenv(name)
    (x, y), _ = own_data()
    with pytest.raises(syncfac.ConfigError) as info:
        syncfac.node(tiny_model(), (x, y), steps=2)
    assert "no cluster: give --cluster FILE or set the TF_CONFIG" \
        in str(info.value)
