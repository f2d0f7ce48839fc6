#!/usr/bin/env bash
# Every node program of a real cluster on loopback (syncfac-launch: chief,
# two workers, a PS shard, one process each) with --metrics_port and
# --logdir: each task serves /metrics on the port plus its position in the
# cluster (chief 0, workers 1 and 2, ps 3) with its own job/task labels and
# its roles' counters; only the chief serves the status page and writes an
# event file, whose scalars match the chief's --metrics file.
#
#   tests/observability/cluster_metrics.sh BUILD_DIR
set -euo pipefail

build=${1:?usage: cluster_metrics.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/free_port.sh"
fail_lines=30
. "$here/scratch_run.sh"

# One run of 8 ports, so that the nodes' 4 and the metrics' 4 never overlap.
nodes=$(free_ports 8)
metrics=$((nodes + 4))
cat > "$work/cluster.json" <<JSON
{"cluster": {"chief": ["localhost:$nodes"],
             "worker": ["localhost:$((nodes + 1))", "localhost:$((nodes + 2))"],
             "ps": ["localhost:$((nodes + 3))"]}}
JSON
timeout 600 "$build/bin/syncfac-launch" --cluster "$work/cluster.json" -- \
  --fake_data --fake_train_size 2560 --batch_size 16 --steps 100000 \
  --log_every 5 --no_progress --metrics_port "$metrics" \
  --logdir "$work/logs" --metrics "$work/metrics.jsonl" > "$work/run.log" 2>&1 &
pid=$!

scrape() { curl -sf -m 10 "http://127.0.0.1:$1/metrics"; }
# Until the chief has a train line and every task answers (bounded).
for _ in $(seq 360); do
  ok=1
  for k in 0 1 2 3; do scrape $((metrics + k)) > "$work/m$k.txt" 2>/dev/null || ok=0; done
  [ $ok -eq 1 ] && grep -q '^syncfac_train_loss' "$work/m0.txt" \
    && grep -q '^syncfac_worker_steps_total' "$work/m2.txt" && break
  kill -0 "$pid" 2>/dev/null || fail "the cluster ended early"
  sleep 0.5
done
check() { grep -qF -- "$2" "$work/m$1.txt" || fail "task at port +$1 lacks '$2'"; }
check 0 'syncfac_up{job="chief",task="0"} 1'
check 0 'syncfac_global_step{job="chief",task="0"} '
check 0 'syncfac_tokens_granted_total{job="chief",task="0",role="chief"} '
check 0 'syncfac_task_up{job="chief",task="0",peer="worker:1"} 1'
check 1 'syncfac_up{job="worker",task="0"} 1'
check 1 'syncfac_token_wait_seconds_total{job="worker",task="0",role="worker:0"} '
check 2 'syncfac_peers_lost_total{job="worker",task="1",role="worker:1"} 0'
check 3 'syncfac_up{job="ps",task="0"} 1'
check 3 'syncfac_pushes_accepted_total{job="ps",task="0",role="ps:0"} '
check 3 'syncfac_pushes_refused_total{job="ps",task="0",role="ps:0"} 0'
if grep -q '^syncfac_global_step' "$work/m3.txt"; then fail "the PS task serves the run's figures"; fi
curl -sf -m 10 "http://127.0.0.1:$metrics/" > "$work/page.html" || fail "no status page on the chief"
grep -q '<h1>syncfac: chief:0</h1>' "$work/page.html" || fail "the chief's page has no heading"
code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((metrics + 3))/")
[ "$code" = 404 ] || fail "a PS task answers / with $code"
if command -v promtool >/dev/null; then
  for k in 0 1 2 3; do promtool check metrics < "$work/m$k.txt" || fail "promtool on task +$k"; done
fi

# A few train lines, then stop the run and check the chief's event file
# against its metrics file.
for _ in $(seq 360); do
  [ "$(grep -c '"loss"' "$work/metrics.jsonl" 2>/dev/null || true)" -ge 3 ] && break
  kill -0 "$pid" 2>/dev/null || fail "the cluster ended early"
  sleep 0.5
done
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
files=$(ls "$work/logs" | grep -c tfevents || true)
[ "$files" -eq 1 ] || fail "expected one event file (the chief's), got $files"
# TensorBoard's own reader, from the tests' venv (scripts/test-venv.sh).
. "$here/tensorboard_venv.sh" "$build"
"$tb_python" - "$work/logs" "$work/metrics.jsonl" <<'PY' || fail "TensorBoard's reader disagrees with the metrics file"
import json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0}); acc.Reload()
import math
lines = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
got = {e.step: e.value for e in acc.Scalars("loss")}
want = {o["step"]: o["loss"] for o in lines if "loss" in o}
# The run was stopped: the last line may be in one and not yet the other.
assert len(want) >= 3 and len(set(want) ^ set(got)) <= 1, (sorted(want), sorted(got))
# float32 in the event file, 10 digits in the JSON line: equal within that.
for step in set(want) & set(got):
    assert math.isclose(got[step], want[step], rel_tol=1e-6), (step, got[step], want[step])
print("chief event file: %d loss points" % len(got))
PY
echo "ok: four tasks on ports $metrics..$((metrics + 3))"
