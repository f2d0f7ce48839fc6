"""The Python module syncfac (docs/python.md) with Debian's pytest: the
models (builder, JSON round trip), every error path as its exception, the
zero-copy claim, training from Python against the same run on the command
line (the same params_digest), logs on sys.stdout, and two threads.

Run by CTest as python_module (tests/python/CMakeLists.txt) with
PYTHONPATH=build/python, SYNCFAC_BIN=build/bin and SYNCFAC_SOURCE_DIR.
"""

import ast
import json
import os
import subprocess
import threading
import time
import warnings

import numpy as np
import pytest

import syncfac
from interrupted_run import interrupted, logged_step

BIN = os.environ["SYNCFAC_BIN"]
SOURCE = os.environ["SYNCFAC_SOURCE_DIR"]
SEEDS_CONVNET = os.path.join(SOURCE, "examples", "models", "seeds_convnet.json")

# A deterministic run (tests/examples/process.hpp's deterministic_flags):
# one worker and no initial tokens, so that every step takes the worker's
# next batch, one compute thread.
DETERMINISTIC = dict(batch_size=32, seed=3, threads=1, no_progress=True,
                     num_tokens=0, workers=1, log_every=10)
DETERMINISTIC_CLI = ["--batch_size", "32", "--seed", "3", "--threads", "1",
                     "--no_progress", "--num_tokens", "0",
                     "--worker_replicas", "1", "--log_every", "10"]


def tiny_model(input_shape=(8, 8, 1), classes=3):
    return syncfac.Sequential(
        [syncfac.conv2d(4, 3, padding="same"), syncfac.relu(),
         syncfac.max_pool(2), syncfac.flatten(), syncfac.dense(classes)],
        input_shape=input_shape, name="tiny")


def tiny_data(n=64, dtype=np.uint8, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, 8, 8, 1)).astype(dtype)
    y = rng.integers(0, classes, size=n)
    y[:classes] = np.arange(classes)  # every class present
    return x, y


def run_cli(*args):
    res = subprocess.run([os.path.join(BIN, "convnet_mnist_single"), *args],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


# --- the module ------------------------------------------------------------

def test_imports_from_the_build_tree():
    assert os.path.dirname(syncfac.__file__).endswith(
        os.path.join("python", "syncfac"))
    assert issubclass(syncfac.ConfigError, syncfac.Error)
    assert issubclass(syncfac.ConfigError, ValueError)
    assert issubclass(syncfac.DataError, ValueError)
    assert issubclass(syncfac.FileError, OSError)
    assert "--learning_rate" in syncfac.flags_help()


def test_cmake_install_puts_an_importable_package(tmp_path):
    build = os.environ["SYNCFAC_BINARY_DIR"]
    where = os.environ["SYNCFAC_PYTHON_INSTALL_DIR"]
    res = subprocess.run(["cmake", "--install", build, "--component",
                          "python", "--prefix", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    package = tmp_path / where / "syncfac"
    assert sorted(p.name for p in package.iterdir() if p.suffix != ".so") \
        == ["__init__.py", "_core.pyi", "py.typed"]
    probe = ("import syncfac, sys; m = syncfac.load_model(sys.argv[1]); "
             "print(syncfac.__file__, m.name)")
    res = subprocess.run(["/usr/bin/python3", "-c", probe, SEEDS_CONVNET],
                         capture_output=True, text=True, timeout=120,
                         cwd=str(tmp_path),
                         env=dict(os.environ,
                                  PYTHONPATH=str(tmp_path / where)))
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(package / "__init__.py"),
                                  "seeds_convnet"]
    # Under the default prefix the same directory is one Debian's python3
    # searches.
    res = subprocess.run(["/usr/bin/python3", "-c",
                          "import sys; print('\\n'.join(sys.path))"],
                         capture_output=True, text=True, timeout=60,
                         env={"PATH": os.environ.get("PATH", "")})
    assert os.path.join("/usr/local", where) in res.stdout.split("\n")


# --- models ----------------------------------------------------------------

def seeds_convnet_by_builder():
    return syncfac.Sequential(
        [syncfac.conv2d(16, 5, padding="SAME"), syncfac.relu(),
         syncfac.max_pool(3, 2, padding="SAME"),
         syncfac.conv2d(16, 5, padding="SAME", activation="relu"),
         syncfac.max_pool(3, 2, padding="SAME"),
         syncfac.flatten(), syncfac.dense(10)],
        input_shape=(28, 28, 1), name="seeds_convnet")


def test_builder_equals_the_model_file():
    built = seeds_convnet_by_builder()
    loaded = syncfac.load_model(SEEDS_CONVNET)
    assert built == loaded
    assert built.to_json() == loaded.to_json()
    assert built.layer_names == ["conv0", "relu", "pool1", "conv2",
                                 "pool3", "flatten", "fc4"]
    # A layer more is another model.
    other = syncfac.Sequential(
        [syncfac.flatten(), syncfac.dense(10)], input_shape=(28, 28, 1),
        name="seeds_convnet")
    assert not (other == loaded)


def test_to_json_round_trip():
    model = syncfac.Sequential(
        [syncfac.embedding_bag(100, 8, combiner="sum"),
         syncfac.dense(16, activation="tanh", init="he", name="hidden"),
         syncfac.dense(4)],
        input_shape=(5,), name="bags", init="glorot")
    text = model.to_json()
    assert json.loads(text)["layers"][0]["type"] == "embedding_bag"
    again = syncfac.load_model(text)
    # The text spells out the derived names: the same JSON, and a model
    # equal to the one read back from it again.
    assert again.to_json() == text
    assert syncfac.load_model(again.to_json()) == again
    assert again.layer_names == ["emb0", "hidden", "fc2"]
    assert again.name == "bags" and again.input_shape == [5]
    assert again.loss == "softmax_cross_entropy"


def test_a_residual_graph_by_builder_equals_the_model_file():
    # examples/models/residual_convnet.json, layer by layer: layers that
    # name their inputs, add and concat's builder spellings.
    same = dict(padding="SAME")
    built = syncfac.Sequential(
        [syncfac.conv2d(16, 3, name="stem", **same), syncfac.relu(),
         syncfac.max_pool(2, name="pool0"),
         syncfac.conv2d(16, 3, name="block1a", **same), syncfac.relu(),
         syncfac.conv2d(16, 3, name="block1b", **same),
         syncfac.add(["pool0", "block1b"], name="block1"), syncfac.relu(),
         syncfac.max_pool(2, name="pool1"),
         syncfac.conv2d(32, 3, name="block2a", **same), syncfac.relu(),
         syncfac.conv2d(32, 3, name="block2b", **same),
         syncfac.conv2d(32, 1, name="shortcut2", inputs=["pool1"]),
         syncfac.add(["shortcut2", "block2b"], name="block2"),
         syncfac.relu(), syncfac.max_pool(7, name="pool2"), syncfac.flatten(),
         syncfac.dense(10, name="logits")],
        input_shape=(28, 28, 1), name="residual_convnet", init="he")
    loaded = syncfac.load_model(os.path.join(
        os.path.dirname(SEEDS_CONVNET), "residual_convnet.json"))
    assert built.to_json() == loaded.to_json()
    block2 = [l for l in json.loads(built.to_json())["layers"]
              if l.get("name") == "block2"]
    assert block2[0]["inputs"] == ["shortcut2", "block2b"]
    assert "add(['pool0', 'block1b']" in repr(syncfac.add(["pool0",
                                                           "block1b"]))
    # A concat of what differs in height is refused naming both shapes.
    with pytest.raises(syncfac.ConfigError) as info:
        syncfac.Sequential(
            [syncfac.conv2d(2, 3, name="a"), syncfac.conv2d(2, 3, name="b"),
             syncfac.concat(["a", "b"]), syncfac.flatten(), syncfac.dense(2)],
            input_shape=(8, 8, 1))
    assert "input 1 is [-1, 4, 4, 2] and input 0 [-1, 6, 6, 2]" in str(
        info.value)


def test_load_model_takes_a_path_object(tmp_path):
    import pathlib
    model = syncfac.load_model(pathlib.Path(SEEDS_CONVNET))
    assert model.name == "seeds_convnet"


@pytest.mark.parametrize("make, message", [
    (lambda: syncfac.Sequential([syncfac.dense(10)], input_shape=(28, 28, 1)),
     "does not chain"),
    (lambda: syncfac.conv2d(4, 3, padding="round"), "unknown padding 'round'"),
    (lambda: syncfac.dense(4, activation="gelu"), "unknown activation 'gelu'"),
    (lambda: syncfac.embedding_bag(10, 2, combiner="max"),
     "unknown combiner 'max'"),
    (lambda: syncfac.Sequential([syncfac.flatten(), syncfac.dense(0)],
                                input_shape=(4,)), "units"),
    (lambda: syncfac.Sequential([syncfac.flatten(), syncfac.dense(3)],
                                input_shape=(4,), loss="hinge"),
     "unknown loss 'hinge'"),
    (lambda: syncfac.Sequential([syncfac.relu()], input_shape=(4,)),
     "activation"),
    (lambda: syncfac.load_model('{"name": "x", "input_shape": [4], '
                                '"layers": [], "loss": "softmax_cross_entropy",'
                                ' "dropout": 1}'), "unknown field"),
    (lambda: syncfac.load_model("{not json"), "model JSON"),
])
def test_bad_descriptions_raise_config_error(make, message):
    with pytest.raises(syncfac.ConfigError) as info:
        make()
    assert message in str(info.value)
    assert info.value.code in ("invalid_config", "invalid_argument",
                               "shape_mismatch")


def test_evaluate_and_predict_with_the_checkpoints_parameters(tmp_path):
    x, y = tiny_data()
    xt, yt = tiny_data(n=40, seed=1)
    model = tiny_model()
    summary = syncfac.train(model, (x, y), test=(xt, yt), steps=8,
                            checkpoint_dir=tmp_path, **DETERMINISTIC)
    ckpt = syncfac.load_checkpoint(tmp_path)
    result = syncfac.evaluate(model, ckpt, (xt, yt), batch_size=7)
    assert result["examples"] == 40
    # The run's own final evaluation, with the same parameters.
    assert result["accuracy"] == summary["test_accuracy"]
    assert result["loss"] == pytest.approx(summary["test_loss"], rel=1e-5)
    probs = syncfac.predict(model, ckpt["params"], xt, batch_size=16)
    assert probs.shape == (40, 3) and probs.dtype == np.float32
    assert np.allclose(probs.sum(axis=1), 1, atol=1e-5)
    assert np.mean(probs.argmax(axis=1) == yt) == result["accuracy"]
    # Other parameters predict otherwise.
    zero = {k: np.zeros_like(v) for k, v in ckpt["params"].items()}
    assert np.allclose(syncfac.predict(model, zero, xt), 1 / 3)


def test_a_normalised_model_evaluates_by_its_moving_statistics(tmp_path):
    # examples/models/normalised_convnet.json from the builder; after a
    # run, evaluate and predict run evaluation passes: batch_norm by the
    # checkpoint's moving statistics (the run's own test evaluation gives
    # the same accuracy), dropout off (the same probabilities twice).
    same = dict(padding="SAME")
    built = syncfac.Sequential(
        [syncfac.conv2d(8, 3, name="conv0", **same),
         syncfac.batch_norm(momentum=0.9, activation="relu", name="bn0"),
         syncfac.max_pool(2, name="pool0"),
         syncfac.conv2d(16, 3, name="conv1", **same),
         syncfac.batch_norm(momentum=0.9, activation="relu", name="bn1"),
         syncfac.avg_pool(2, name="pool1"), syncfac.dropout(0.2, name="drop"),
         syncfac.global_avg_pool(name="gap"), syncfac.dense(10, name="logits")],
        input_shape=(28, 28, 1), name="normalised_convnet", init="he")
    loaded = syncfac.load_model(os.path.join(
        os.path.dirname(SEEDS_CONVNET), "normalised_convnet.json"))
    assert built.to_json() == loaded.to_json()
    x, y = tiny_data()
    xt, yt = tiny_data(n=40, seed=1)
    model = syncfac.Sequential(
        [syncfac.conv2d(4, 3, padding="SAME"),
         syncfac.batch_norm(momentum=0.5, activation="relu", name="bn"),
         syncfac.dropout(0.3), syncfac.global_avg_pool(), syncfac.dense(3)],
        input_shape=(8, 8, 1), name="normalised")
    summary = syncfac.train(model, (x, y), test=(xt, yt), steps=8,
                            checkpoint_dir=tmp_path, **DETERMINISTIC)
    ckpt = syncfac.load_checkpoint(tmp_path)
    # The moving statistics moved off their start (0 and 1).
    assert not np.allclose(ckpt["params"]["bn/moving_mean"], 0)
    assert not np.allclose(ckpt["params"]["bn/moving_variance"], 1)
    result = syncfac.evaluate(model, ckpt, (xt, yt))
    assert result["accuracy"] == summary["test_accuracy"]
    first = syncfac.predict(model, ckpt["params"], xt)
    assert np.array_equal(first, syncfac.predict(model, ckpt["params"], xt))
    # Other moving statistics give other predictions.
    moved = dict(ckpt["params"])
    moved["bn/moving_mean"] = moved["bn/moving_mean"] + 5
    assert not np.allclose(syncfac.predict(model, moved, xt), first)


def test_evaluate_refuses_parameters_that_do_not_fit(tmp_path):
    x, y = tiny_data()
    model = tiny_model()
    params = {"conv0/kernel": np.zeros((3, 3, 1, 4)),
              "conv0/bias": np.zeros(4), "fc2/weights": np.zeros((64, 3))}
    with pytest.raises(syncfac.ConfigError) as info:
        syncfac.evaluate(model, params, (x, y))
    assert "no array for variable 'fc2/bias' of model 'tiny'" \
        in str(info.value)
    with pytest.raises(syncfac.ConfigError) as info:
        syncfac.evaluate(model, dict(params, **{"fc2/bias": np.zeros(3),
                                                "fc9/bias": np.zeros(3)}),
                         (x, y))
    assert "'fc9/bias' is not a variable of model 'tiny'" in str(info.value)
    with pytest.raises(syncfac.ConfigError) as info:
        syncfac.evaluate(model, dict(params, **{"fc2/bias": np.zeros(5)}),
                         (x, y))
    assert "fc2/bias" in str(info.value)
    with pytest.raises(syncfac.DataError) as info:
        syncfac.predict(model, dict(params, **{"fc2/bias": np.zeros(3)}),
                        np.zeros((4, 8, 8, 1), np.bool_))
    assert "array 'x': dtype '|b1' is not supported" in str(info.value)


def test_load_checkpoint_refusals(tmp_path):
    with pytest.raises(syncfac.FileError) as info:
        syncfac.load_checkpoint(tmp_path)
    assert "no checkpoint in '%s'" % tmp_path in str(info.value)
    (tmp_path / "ckpt-3.safetensors").write_bytes(b"not a checkpoint")
    with pytest.raises(syncfac.DataError) as info:
        syncfac.load_checkpoint(tmp_path)
    assert "ckpt-3.safetensors" in str(info.value)


def test_a_missing_model_file_raises_file_error(tmp_path):
    path = str(tmp_path / "absent.json")
    with pytest.raises(syncfac.FileError) as info:
        syncfac.load_model(path)
    assert path in str(info.value)
    assert info.value.code == "io_error"


# --- data: the .npz path's checks and messages ------------------------------

@pytest.mark.parametrize("x, y, message", [
    (np.zeros((64,), np.float32), np.zeros(64, np.int64),
     "array 'data[0]': shape (64,) must be (N, D), (N, H, W) or (N, H, W, C)"),
    (np.zeros((5, 8, 8, 1), np.uint8), np.zeros(3, np.int64),
     "array 'data[1]': 3 labels for 5 examples in 'data[0]'"),
    (np.zeros((4, 8, 8, 1), np.uint8), np.zeros((4, 1), np.int64),
     "array 'data[1]': shape (4, 1) must be (N,)"),
    (np.zeros((4, 8, 8, 1), np.uint8), np.array([0, 1, 300, 2]),
     "array 'data[1]': label 300 at index 2 is outside [0, 255]"),
    (np.zeros((4, 8, 8, 1), np.uint8), np.array([0, -1, 2, 2]),
     "label -1 at index 1 is outside [0, 255]"),
    (np.zeros((4, 8, 8, 1), np.uint8), np.zeros(4, np.float32),
     "array 'data[1]': dtype '<f4' is not an integer type (labels are integers)"),
    (np.full((4, 8, 8, 1), 256, np.int64), np.zeros(4, np.int64),
     "array 'data[0]': dtype '<i8': value 256 at flat index 0 is not a pixel"),
    (np.zeros((4, 8, 8, 1), np.bool_), np.zeros(4, np.int64),
     "array 'data[0]': dtype '|b1' is not supported"),
    (np.zeros((4, 8, 8, 1), np.complex64), np.zeros(4, np.int64),
     "is not supported"),
    (np.zeros((0, 8, 8, 1), np.uint8), np.zeros(0, np.int64),
     "array 'data[0]': no examples"),
])
def test_bad_arrays_raise_data_error(x, y, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", syncfac.CopyWarning)
        with pytest.raises(syncfac.DataError) as info:
            syncfac.data_info(tiny_model(), (x, y))
    assert message in str(info.value)
    assert info.value.code == "bad_data"


def test_nan_is_refused_by_name():
    x, y = tiny_data(dtype=np.float32)
    x = x / 255
    x.flat[7] = np.nan
    with pytest.raises(syncfac.DataError) as info:
        syncfac.train(tiny_model(), (x, y), steps=2, **DETERMINISTIC)
    assert ("array 'data[0]': value nan at flat index 7 is not finite"
            in str(info.value))


def test_data_that_does_not_fit_the_model():
    x, y = tiny_data()
    with pytest.raises(syncfac.ConfigError) as info:
        syncfac.data_info(tiny_model(input_shape=(28, 28, 1)), (x, y))
    assert "takes inputs" in str(info.value)
    assert "syncfac.train data" in str(info.value)
    # Labels beyond the model's classes: 5 classes for a model of 3.
    x, y = tiny_data(classes=5)
    with pytest.raises(syncfac.Error) as info:
        syncfac.train(tiny_model(classes=3), (x, y), steps=1,
                      **DETERMINISTIC)
    assert "has 3 classes but the data 'syncfac.train data' has label 4" \
        in str(info.value)


def test_a_split_is_a_pair():
    x, y = tiny_data()
    for bad in (x, (x,), (x, y, y)):
        with pytest.raises(syncfac.ConfigError) as info:
            syncfac.train(tiny_model(), bad, steps=1)
        assert "expected a pair (x, y)" in str(info.value)
    with pytest.raises(syncfac.ConfigError) as info:
        syncfac.train(tiny_model(), (x, y), test=(x,), steps=1)
    assert "test: expected a pair (x, y) of arrays, got 1 items" \
        in str(info.value)


@pytest.mark.parametrize("flags, message", [
    (dict(learning_rate=-3.0), "--learning_rate -3.0: must be > 0"),
    (dict(optimizer="lbfgs"), "lbfgs"),
    (dict(dampin=0.1), "dampin"),
    (dict(data_dir="/tmp"), "'data_dir' is not taken here"),
    (dict(model_file="x.json"), "'model_file' is not taken here"),
    (dict(eval_every=5), "evaluations need a test set"),
])
def test_bad_flags_raise_config_error(flags, message):
    x, y = tiny_data()
    with pytest.raises(syncfac.ConfigError) as info:
        syncfac.train(tiny_model(), (x, y), steps=1, **flags)
    assert message in str(info.value)


def test_the_model_must_be_a_model():
    x, y = tiny_data()
    with pytest.raises(syncfac.ConfigError):
        syncfac.train(SEEDS_CONVNET, (x, y), steps=1)


# --- zero copy ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_contiguous_uint8_and_float32_are_read_in_place(dtype):
    x, y = tiny_data(dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no CopyWarning may come
        info = syncfac.data_info(tiny_model(), (x, y))
    assert info["borrowed"] is True
    assert info["examples_address"] == x.ctypes.data
    assert info["count"] == 64 and info["num_classes"] == 3
    assert info["float_inputs"] == (dtype == np.float32)


@pytest.mark.parametrize("make, what", [
    (lambda x: x.astype(np.float64), "<f8 converted to float32"),
    (lambda x: np.asfortranarray(x.astype(np.float32)), "not C-contiguous"),
    (lambda x: x.astype(np.float32)[::2], "not C-contiguous"),
    (lambda x: x.astype(">f4"), "big-endian"),
    (lambda x: x.astype(np.int64), "<i8 inputs are converted by the runtime"),
    (lambda x: x.tolist(), "not a NumPy array"),
])
def test_other_layouts_are_copied_once_with_a_warning(make, what):
    x, y = tiny_data()
    given = make(x)
    if isinstance(given, np.ndarray) and given.shape[0] != 64:
        y = y[::2].copy()
    with pytest.warns(syncfac.CopyWarning, match="array 'data\\[0\\]'") as rec:
        info = syncfac.data_info(tiny_model(), (given, y))
    assert len(rec) == 1
    assert what in str(rec[0].message)
    if isinstance(given, np.ndarray):
        assert info["examples_address"] != given.ctypes.data
    # The same examples as the uint8 original (float ones scaled alike).
    assert info["count"] == len(y)


def test_the_run_reads_the_arrays_buffer():
    x, y = tiny_data()
    summary = syncfac.train(tiny_model(), (x, y), steps=3, **DETERMINISTIC)
    assert summary["arrays"]["borrowed"] is True
    assert summary["arrays"]["examples_address"] == x.ctypes.data
    assert summary["global_step"] == 3


# --- the same run as the command line ---------------------------------------

def test_fake_data_digest_equals_the_command_line(tmp_path):
    steps = 30
    cli_summary = tmp_path / "cli.json"
    run_cli("--fake_data", "--fake_train_size", "2048", "--fake_test_size",
            "500", "--model_file", SEEDS_CONVNET, "--steps", str(steps),
            "--summary", str(cli_summary), *DETERMINISTIC_CLI)
    cli = json.loads(cli_summary.read_text())
    summary = syncfac.train(syncfac.load_model(SEEDS_CONVNET),
                            syncfac.fake_data(2048, 1),
                            test=syncfac.fake_data(500, 2), steps=steps,
                            **DETERMINISTIC)
    assert summary["global_step"] == cli["global_step"] == steps
    assert summary["params_digest"] == cli["params_digest"]
    assert summary["test_accuracy"] == cli["test_accuracy"]
    # The digest sees the run: another seed ends elsewhere.
    other = syncfac.train(syncfac.load_model(SEEDS_CONVNET),
                          syncfac.fake_data(2048, 1), steps=steps,
                          **dict(DETERMINISTIC, seed=4))
    assert other["params_digest"] != cli["params_digest"]


def test_own_data_with_kfac_equals_the_npz_run(tmp_path):
    rng = np.random.default_rng(7)
    x = rng.random((256, 8, 8, 1), dtype=np.float32)
    y = rng.integers(0, 3, size=256)
    xt = rng.random((64, 8, 8, 1), dtype=np.float32)
    yt = rng.integers(0, 3, size=64)
    npz = tmp_path / "own.npz"
    np.savez(npz, x_train=x, y_train=y, x_test=xt, y_test=yt)
    model = tiny_model()
    model_file = tmp_path / "tiny.json"
    model_file.write_text(model.to_json())
    # K-FAC's roles run (statistics every step: kfac_cadence exact), but
    # no inverse is applied (min_cov_updates beyond the run): inverses
    # reach the shards when they are ready, so a run with them depends on
    # timing (tests/examples/fault_digests.cpp, kfac_no_inverses).
    flags = dict(DETERMINISTIC, optimizer="kfac", learning_rate=0.01,
                 min_cov_updates=1000000, ps_tasks=2, kfac_cadence="exact")
    cli_summary = tmp_path / "cli.json"
    run_cli("--data", str(npz), "--model_file", str(model_file), "--steps",
            "20", "--optimizer", "kfac", "--learning_rate", "0.01",
            "--min_cov_updates", "1000000", "--ps_tasks", "2",
            "--kfac_cadence", "exact", "--summary",
            str(cli_summary), *DETERMINISTIC_CLI)
    cli = json.loads(cli_summary.read_text())
    summary = syncfac.train(model, (x, y), test=(xt, yt), steps=20, **flags)
    assert "kfac" in summary
    assert summary["params_digest"] == cli["params_digest"]
    assert summary["test_accuracy"] == cli["test_accuracy"]


# --- the run from Python -----------------------------------------------------

def test_log_lines_reach_sys_stdout(capsys):
    x, y = tiny_data()
    summary = syncfac.train(tiny_model(), (x, y), steps=20,
                            **dict(DETERMINISTIC, log_every=5))
    out = capsys.readouterr().out
    assert out.startswith("syncfac.train: ")
    assert "global_step: 20" in out
    assert summary["test_examples"] == 0  # no test set: nothing evaluated


def test_a_callback_sees_every_metrics_line_and_can_stop_the_run(tmp_path):
    x, y = tiny_data()
    seen = []

    def enough(metrics):
        seen.append(metrics)
        return metrics["step"] >= 10

    summary = syncfac.train(tiny_model(), (x, y), steps=100000,
                            checkpoint_dir=tmp_path, callback=enough,
                            **dict(DETERMINISTIC, log_every=5))
    assert [m["step"] for m in seen] == [5, 10]
    assert all(np.isfinite(m["loss"]) and 0 <= m["train_accuracy"] <= 1
               for m in seen)
    assert summary["preempted"] == "callback"
    assert 10 <= summary["global_step"] <= 12
    # Stopped as a signal stops it: checkpointed at the step it ended.
    assert syncfac.load_checkpoint(tmp_path)["global_step"] \
        == summary["global_step"]
    # Without a stop the callback hears every line to the end.
    seen.clear()
    syncfac.train(tiny_model(), (x, y), steps=20,
                  callback=lambda m: seen.append(m["step"]),
                  **dict(DETERMINISTIC, log_every=5))
    assert seen == [5, 10, 15, 20]


def test_a_callbacks_exception_ends_the_run_and_is_raised():
    x, y = tiny_data()

    def broken(metrics):
        raise LookupError("no step %d here" % metrics["step"])

    with pytest.raises(LookupError, match="no step 5 here"):
        syncfac.train(tiny_model(), (x, y), steps=100000, callback=broken,
                      **dict(DETERMINISTIC, log_every=5))
    assert not syncfac.training_now()
    with pytest.raises(syncfac.ConfigError, match="callback must be callable"):
        syncfac.train(tiny_model(), (x, y), steps=1, callback=3)


def test_checkpoints_and_summary_file(tmp_path):
    x, y = tiny_data()
    first = syncfac.train(tiny_model(), (x, y), steps=6,
                          checkpoint_dir=tmp_path / "ckpt",
                          summary=tmp_path / "s.json", **DETERMINISTIC)
    assert json.loads((tmp_path / "s.json").read_text())["params_digest"] \
        == first["params_digest"]
    # The end's checkpoint as arrays: every variable of the model, the
    # run's final parameters (the same digest).
    ckpt = syncfac.load_checkpoint(tmp_path / "ckpt")
    assert ckpt["global_step"] == 6
    assert ckpt["path"].endswith("ckpt-6.safetensors")
    assert ckpt["params_digest"] == first["params_digest"]
    params = ckpt["params"]
    assert sorted(params) == ["conv0/bias", "conv0/kernel", "fc2/bias",
                              "fc2/weights"]
    assert params["conv0/kernel"].shape == (3, 3, 1, 4)
    assert params["fc2/weights"].shape == (4 * 4 * 4, 3)
    assert params["fc2/weights"].dtype == np.float32
    assert np.all(np.isfinite(params["fc2/weights"]))
    assert np.any(params["fc2/bias"] != 0)  # trained: biases start at 0
    # Started again with more steps, it resumes from step 6.
    again = syncfac.train(tiny_model(), (x, y), steps=10,
                          checkpoint_dir=tmp_path / "ckpt", **DETERMINISTIC)
    assert again["global_step"] == 10
    assert again["checkpoints"]["restored_step"] == 6


STOPPED_RUN = """
import sys, numpy as np, syncfac
rng = np.random.default_rng(0)
x = rng.integers(0, 256, size=(64, 8, 8, 1)).astype(np.uint8)
y = np.arange(64) % 3
model = syncfac.Sequential([syncfac.flatten(), syncfac.dense(3)],
                           input_shape=(8, 8, 1), name="tiny")
try:
    syncfac.train(model, (x, y), steps=int(sys.argv[2]), batch_size=8,
                  threads=1, log_every=1, no_progress=True,
                  checkpoint_dir=sys.argv[1])
    print("ENDED")
except KeyboardInterrupt as stop:
    print("INTERRUPTED", stop.summary["global_step"], stop)
# The interpreter's own SIGINT handling is back after the run.
import signal
print("HANDLER", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""


def test_ctrl_c_stops_the_run_checkpointed(tmp_path):
    ckpt = tmp_path / "ckpt"
    word, out, err = interrupted(
        ["/usr/bin/python3", "-u", "-c", STOPPED_RUN, str(ckpt), "1000000"],
        logged_step(5), timeout=120)
    step = int(word.split()[1])
    assert 5 <= step < 1000000
    assert ("preempted (SIGINT) at global step %d; checkpointed into %s"
            % (step, ckpt)) in word
    assert "HANDLER True" in out
    # The checkpoint of the stopped step: a restart resumes there.
    again = subprocess.run(
        ["/usr/bin/python3", "-u", "-c", STOPPED_RUN, str(ckpt),
         str(step + 3)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "ENDED" in again.stdout
    assert "checkpoint: restored %s at global step %d" \
        % (ckpt / ("ckpt-%d.safetensors" % step), step) in again.stdout
    assert "global_step: %d " % (step + 3) in again.stdout
    assert "global_step: 1 " not in again.stdout


def test_a_second_run_at_once_is_refused():
    x, y = fake = syncfac.fake_data(2048, 1)
    model = syncfac.load_model(SEEDS_CONVNET)
    result = {}

    def long_run():
        result["summary"] = syncfac.train(model, fake, steps=400,
                                          **DETERMINISTIC)

    worker = threading.Thread(target=long_run)
    worker.start()
    deadline = time.monotonic() + 60
    while not syncfac.training_now():
        assert time.monotonic() < deadline, "the first run did not start"
        time.sleep(0.01)
    # The interpreter runs on while the first run trains (GIL released).
    with pytest.raises(syncfac.Error) as info:
        syncfac.train(tiny_model(), tiny_data(), steps=1)
    assert "another run of this process is in progress" in str(info.value)
    assert syncfac.training_now()
    worker.join(timeout=300)
    assert not worker.is_alive(), "the first run did not end in 300 s"
    assert result["summary"]["global_step"] == 400
    assert not syncfac.training_now()


def test_the_own_model_example_trains_its_spirals():
    # examples/python/own_model.py as a user runs it: a model built in
    # Python on NumPy data of its own, K-FAC, the parameters back.
    res = subprocess.run(
        ["/usr/bin/python3",
         os.path.join(SOURCE, "examples", "python", "own_model.py")],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    said = [l for l in res.stdout.splitlines()
            if l.startswith("test accuracy after 600 steps: ")]
    assert said, res.stdout
    accuracy = float(said[0].split()[5])
    # Chance is 1/3; the spirals are told apart well above it.
    assert accuracy >= 0.9, res.stdout
    # evaluate() with the checkpoint's arrays: the run's own accuracy
    # (printed with 4 digits above).
    evaluated = [ast.literal_eval(l[len("evaluated again: "):])
                 for l in res.stdout.splitlines()
                 if l.startswith("evaluated again: ")]
    assert evaluated, res.stdout
    assert evaluated[0]["examples"] == 1000
    assert evaluated[0]["accuracy"] == pytest.approx(accuracy, abs=5e-5)
