#!/usr/bin/env bash
# TensorBoard's own reader on the event files of real runs: a sync run of
# convnet_mnist_single with --logdir, --metrics and checkpoints, then the
# same command again for more steps (it resumes from the checkpoint), then
# once more from an older checkpoint (steps done twice). The directory must
# load in TensorBoard's EventAccumulator with every number of the
# JSON-lines metrics as a scalar at its step (value as float32; a step
# logged twice: the later value), nothing else, one continuous step
# sequence across the three files with each step once, the flags as text;
# the metrics file must have been appended to, its wall_s continuing.
# TensorBoard comes from the tests' venv (scripts/test-venv.sh).
#
#   tests/observability/tensorboard_reader.sh BUILD_DIR
set -euo pipefail

build=${1:?usage: tensorboard_reader.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/tensorboard_venv.sh" "$build"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {
  timeout 300 "$build/bin/convnet_mnist_single" --fake_data --fake_train_size 2560 \
    --batch_size 32 --log_every 10 --eval_every 20 --no_progress \
    --metrics "$work/metrics.jsonl" --logdir "$work/logs" \
    --checkpoint_dir "$work/ckpt" --checkpoint_every 20 "$@"
}
run --steps 40 > "$work/first.log"
lines_first=$(wc -l < "$work/metrics.jsonl")
# Event file names carry the start second; make sure the second differs.
sleep 1.1
run --steps 80 > "$work/second.log"
grep -q "checkpoint: restored" "$work/second.log" || {
  echo "the second run did not resume:"; cat "$work/second.log"; exit 1; }
# A run that went on past its newest checkpoint before it stopped: drop the
# checkpoint of step 80, so that the third run resumes from 60 and logs 70
# and 80 again. TensorBoard must show each step once (the SessionLog START
# of the resume drops the earlier events after 60).
lines_second=$(wc -l < "$work/metrics.jsonl")
rm "$work/ckpt/ckpt-80.safetensors"
sleep 1.1
run --steps 100 > "$work/third.log"
grep -q "checkpoint: restored .*ckpt-60" "$work/third.log" || {
  echo "the third run did not resume from step 60:"; cat "$work/third.log"; exit 1; }

"$tb_python" - "$work/logs" "$work/metrics.jsonl" "$lines_first" "$lines_second" <<'PY'
import json, math, os, struct, sys
from tensorboard.backend.event_processing import event_accumulator

logdir, metrics_path = sys.argv[1], sys.argv[2]
lines_first, lines_second = int(sys.argv[3]), int(sys.argv[4])
files = sorted(f for f in os.listdir(logdir) if "tfevents" in f)
assert len(files) == 3, f"expected three event files (a run, two resumes), got {files}"

acc = event_accumulator.EventAccumulator(
    logdir, size_guidance={event_accumulator.SCALARS: 0,
                           event_accumulator.TENSORS: 0})
acc.Reload()
tags = acc.Tags()

lines = [json.loads(l) for l in open(metrics_path)]
assert len(lines) > lines_first, "the resumed run wrote no metrics"
expected = {}  # tag -> {step: value}
for i, obj in enumerate(lines):
    if i == lines_second:
        # The third run resumed from step 60: what the earlier ones logged
        # after it is done again (TensorBoard drops it at the START event).
        for tag in expected:
            expected[tag] = {k: v for k, v in expected[tag].items() if k <= 60}
    prefix = obj["source"] + "/" if "source" in obj else ""
    for key, value in obj.items():
        if key in ("step", "wall_s") or not isinstance(value, (int, float)) \
           or isinstance(value, bool):
            continue
        expected.setdefault(prefix + key, {})[obj["step"]] = value

def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]

for name in ("loss", "train_accuracy", "stale_pushes", "examples_per_s",
             "test_loss", "test_accuracy"):
    assert name in expected, f"metrics lack {name}: {sorted(expected)}"
assert sorted(tags["scalars"]) == sorted(expected), \
    f"scalar tags {sorted(tags['scalars'])} != metrics {sorted(expected)}"
for tag, want in expected.items():
    events = acc.Scalars(tag)
    got = {e.step: e.value for e in events}
    assert len(events) == len(got), f"{tag}: a step twice: {[e.step for e in events]}"
    assert sorted(got) == sorted(want), f"{tag}: steps {sorted(got)} != {sorted(want)}"
    for step, value in want.items():
        assert math.isclose(got[step], f32(value), rel_tol=1e-6, abs_tol=1e-12), \
            f"{tag} at {step}: {got[step]} != {value}"

loss_steps = [e.step for e in acc.Scalars("loss")]
assert loss_steps == list(range(10, 101, 10)), f"loss steps {loss_steps}"
walls = [e.wall_time for e in acc.Scalars("loss")]
assert walls == sorted(walls), "wall times go back"

# JSON lines: appended (steps 70 and 80 twice), wall_s continues from the
# first start.
steps = [o["step"] for o in lines if "loss" in o]
assert steps == list(range(10, 81, 10)) + list(range(70, 101, 10)), \
    f"metrics steps {steps}"
wall = [o["wall_s"] for o in lines]
assert wall == sorted(wall), f"wall_s goes back: {wall}"

assert "hparams" in tags["tensors"], f"no hparams text: {tags}"
text = acc.Tensors("hparams")[-1].tensor_proto.string_val[0].decode()
assert "| --logdir |" in text and "| --steps | 100 |" in text, text
print(f"ok: {len(files)} event files, {len(expected)} tags, loss steps {loss_steps}")
PY
