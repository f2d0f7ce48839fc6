#!/bin/bash
# How long a preemption takes: a loopback cluster (chief, one worker, one PS
# shard, --checkpoint_dir) gets kill -TERM to its worker's process once the
# chief logged global step 30; measured: from the signal until every node
# exited (each must exit 143), and the step the run stopped at. Then the
# same commands again, timed until the resumed run ends. Figures:
# docs/benchmarks-history.md, "Preemption". Usage: bench/run_preemption.sh
# [BUILD_BIN] [ROUNDS]
set -euo pipefail
bin=${1:-build-nocuda/bin}
rounds=${2:-5}
prog=$bin/convnet_mnist_distributed
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
flags="--fake_data --fake_train_size 2048 --fake_test_size 500 --batch_size 32
  --seed 3 --threads 1 --no_progress --num_tokens 0 --no_final_eval
  --log_every 10 --steps 600 --checkpoint_every 0 --connect_timeout_ms 60000"
ports() { python3 "$(dirname "$0")/../scripts/free_ports.py" 3 | tr '\n' ' '; echo; }
now() { date +%s.%N; }
echo "round stopped_at signal_to_all_exited_s resume_to_end_s"
for r in $(seq 1 "$rounds"); do
  read -r pc pw pp < <(ports)
  echo "{\"cluster\": {\"chief\": [\"127.0.0.1:$pc\"], \"worker\": [\"127.0.0.1:$pw\"], \"ps\": [\"127.0.0.1:$pp\"]}}" >"$tmp/c.json"
  rm -rf "$tmp/ckpt"
  f="$flags --cluster $tmp/c.json --checkpoint_dir $tmp/ckpt"
  start() {
    $prog $f --job_name ps --task 0 >"$tmp/ps.log" 2>&1 & ps_pid=$!
    $prog $f --job_name chief --task 0 --summary "$tmp/s.json" >"$tmp/chief.log" 2>&1 & chief_pid=$!
    $prog $f --job_name worker --task 0 >"$tmp/worker.log" 2>&1 & worker_pid=$!
  }
  start
  for _ in $(seq 1 3000); do
    grep -qE '^global_step: ([3-9][0-9]|[1-9][0-9]{2})' "$tmp/chief.log" && break
    sleep 0.02
  done
  t0=$(now)
  kill -TERM "$worker_pid"
  for p in $worker_pid $chief_pid $ps_pid; do
    rc=0; wait "$p" || rc=$?
    [ "$rc" -eq 143 ] || { echo "a node exited $rc, not 143" >&2; exit 1; }
  done
  t1=$(now)
  stopped=$(grep -o '"global_step": [0-9]*' "$tmp/s.json" | head -1 | grep -o '[0-9]*$')
  t2=$(now)
  start
  for p in $worker_pid $chief_pid $ps_pid; do wait "$p"; done
  t3=$(now)
  python3 -c "print($r, $stopped, round($t1 - $t0, 3), round($t3 - $t2, 2))"
done
