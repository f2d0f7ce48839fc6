#!/usr/bin/env bash
# syncfac beside its peers in one run (issue 24 item 6), on the same ConvNet
# (examples/models/seeds_convnet.json), data (Fashion-MNIST), batch (128),
# optimizer (momentum SGD, lr 0.01) and topology, interleaved, ROUNDS rounds,
# medians and ratios:
#
#  1. One process, 1 and 2 threads: convnet_mnist_single (its default
#     runtime: chief, one worker and one PS shard as actors in one process)
#     against PyTorch 2.x eager, NCHW and channels-last
#     (bench/peers/torch_convnet.py); 200 timed steps after 20 warm-up. The
#     ratio is against the faster of PyTorch's two layouts.
#  2. A loopback cluster: syncfac's chief, 2 workers and 1 PS shard, one
#     process each via syncfac-launch (convnet_mnist_distributed), against
#     TensorFlow's own SyncReplicasOptimizer (tf.compat.v1; 1 ps and 2
#     workers over gRPC, worker 0 the chief; bench/peers/tf_sync_replicas.py),
#     R = N = 2, 1 compute thread per task; global steps/s after 20 warm-up
#     steps.
#
# In each round every program runs once, syncfac first in odd rounds and
# the peer first in even ones, so that a busy spell hits both alike. Prints
# the load average before and after (the machine may be shared).
#
#   bench/run_peers.sh [rounds=3]
#
# SYNCFAC_BIN_DIR (default build/bin) must hold convnet_mnist_single,
# convnet_mnist_distributed and syncfac-launch: nothing is built here.
# The peers run from the venv bench/peers/venv.sh makes (bench/.venv, or
# PEERS_VENV; pip install torch numpy tensorflow-cpu from PyPI when missing).
# SINGLE_STEPS (220), CLUSTER_STEPS (320) and TF_STEPS (120; TensorFlow's
# global step is over ten times slower) are the steps of each run, warm-up
# included; TF_INTER_OP (2) the inter-op threads of each TensorFlow task.
# Every run is bounded (RUN_LIMIT_S, default 600 s) and a cluster whose
# ports were taken in the meantime is started again on new ones (3 tries).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench: rounds '$rounds' is not a positive integer" >&2; exit 2; }
bin_dir=${SYNCFAC_BIN_DIR:-build/bin}
single_steps=${SINGLE_STEPS:-220}
cluster_steps=${CLUSTER_STEPS:-320}
tf_steps=${TF_STEPS:-120}
tf_inter=${TF_INTER_OP:-2}
limit_s=${RUN_LIMIT_S:-600}
for v in single_steps cluster_steps tf_steps tf_inter limit_s; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "bench: $v '${!v}' is not a positive integer" >&2; exit 2; }
done
for s in single_steps cluster_steps tf_steps; do
  [ "${!s}" -gt 20 ] || { echo "bench: $s ${!s} must exceed the 20 warm-up steps" >&2; exit 2; }
done
for b in convnet_mnist_single convnet_mnist_distributed syncfac-launch; do
  [ -x "$bin_dir/$b" ] || { echo "bench: $bin_dir/$b not built (set SYNCFAC_BIN_DIR)" >&2; exit 1; }
done
py=$(bench/peers/venv.sh torch tf)
# The peers still run and train before they are timed.
PEERS_VENV=${PEERS_VENV:-bench/.venv} python3 bench/peers/check_peers.py . \
  || { echo "bench: the peers' self-check failed" >&2; exit 1; }

out=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$out"
}
trap cleanup EXIT

# A TensorFlow task still there after its chief ended gets WAIT_S seconds,
# then SIGTERM, then SIGKILL.
stop_within() {
  local pid=$1 wait_s=$2
  for _ in $(seq 1 $((wait_s * 10))); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  sleep 1
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

port_taken() { grep -qiE 'address already in use|cannot publish this node|could not start grpc server|failed to bind' "$@"; }

single_syncfac() {  # threads round
  "$bin_dir/convnet_mnist_single" --steps "$single_steps" --warmup 20 \
    --batch_size 128 --optimizer momentum --learning_rate 0.01 --threads "$1" \
    --seed "$2" --no_final_eval --no_progress --log_every 1000 \
    --summary "$out/single_syncfac_t$1_r$2.json" > "$out/single_syncfac_t$1_r$2.log" 2>&1 \
    || { cat "$out/single_syncfac_t$1_r$2.log" >&2; echo "bench: convnet_mnist_single failed" >&2; exit 1; }
}

single_torch() {  # threads round layout
  local flag=()
  [ "$3" = nchw ] || flag=(--channels_last)
  env OMP_NUM_THREADS="$1" timeout "$limit_s" "$py" bench/peers/torch_convnet.py \
    --optimizer momentum --lr 0.01 --batch 128 --steps "$single_steps" --warmup 20 \
    --threads "$1" --seed "$2" "${flag[@]}" --summary_json "$out/single_torch_$3_t$1_r$2.json" \
    > "$out/single_torch_$3_t$1_r$2.log" 2>&1 \
    || { cat "$out/single_torch_$3_t$1_r$2.log" >&2; echo "bench: the PyTorch peer failed" >&2; exit 1; }
}

cluster_syncfac() {  # round
  local try log=$out/cluster_syncfac_r$1.log
  for try in 1 2 3; do
    mapfile -t p < <(python3 bench/peers/free_ports.py 4)
    [ "${#p[@]}" -eq 4 ] || { echo "bench: no 4 free ports for the syncfac cluster" >&2; exit 1; }
    printf '{"cluster": {"chief": ["127.0.0.1:%s"], "worker": ["127.0.0.1:%s", "127.0.0.1:%s"], "ps": ["127.0.0.1:%s"]}}\n' \
      "${p[@]}" > "$out/cluster_r$1.json"
    if "$bin_dir/syncfac-launch" --cluster "$out/cluster_r$1.json" \
         --program "$bin_dir/convnet_mnist_distributed" --max_wall_s "$limit_s" -- \
         --steps "$cluster_steps" --warmup 20 --batch_size 128 --threads 1 \
         --optimizer momentum --learning_rate 0.01 --replicas_to_aggregate 2 \
         --seed "$1" --no_final_eval --no_progress --log_every 1000 \
         --summary "$out/cluster_syncfac_r$1.json" > "$log" 2>&1; then
      return 0
    fi
    port_taken "$log" || break
    echo "bench: a port of the syncfac cluster was taken; again on new ports" >&2
  done
  cat "$log" >&2; echo "bench: the syncfac loopback cluster failed" >&2; exit 1
}

cluster_tf() {  # round
  local try rc base=$out/cluster_tf_r$1
  for try in 1 2 3; do
    mapfile -t p < <(python3 bench/peers/free_ports.py 3)
    [ "${#p[@]}" -eq 3 ] || { echo "bench: no 3 free ports for the TensorFlow cluster" >&2; exit 1; }
    local args=(bench/peers/tf_sync_replicas.py --ps_hosts "127.0.0.1:${p[0]}"
                --worker_hosts "127.0.0.1:${p[1]},127.0.0.1:${p[2]}" --replicas_to_aggregate 2
                --steps "$tf_steps" --warmup 20 --batch 128 --lr 0.01 --threads 1
                --inter_op_threads "$tf_inter" --seed "$1" --max_wall_s "$limit_s")
    pids=()
    timeout "$((limit_s + 30))" "$py" "${args[@]}" --job ps --task 0 > "$base.ps.log" 2>&1 &
    pids+=($!)
    timeout "$((limit_s + 30))" "$py" "${args[@]}" --job worker --task 1 > "$base.w1.log" 2>&1 &
    pids+=($!)
    rc=0
    timeout "$((limit_s + 30))" "$py" "${args[@]}" --job worker --task 0 \
      --summary "$base.json" > "$base.w0.log" 2>&1 || rc=$?
    stop_within "${pids[1]}" 30
    stop_within "${pids[0]}" 0
    pids=()
    [ "$rc" -ne 0 ] || return 0
    port_taken "$base".*.log || break
    echo "bench: a port of the TensorFlow cluster was taken; again on new ports" >&2
  done
  for f in "$base".*.log; do echo "== $f" >&2; tail -20 "$f" >&2; done
  echo "bench: the TensorFlow SyncReplicas cluster failed (exit $rc)" >&2; exit 1
}

field() { python3 -c 'import json,sys; print(f"{json.loads(open(sys.argv[1]).readline())[sys.argv[2]]:.1f}")' "$@"; }

lscpu | grep 'Model name' | sed 's/^Model name: *//' > "$out/cpu"
echo "$(nproc) cores" >> "$out/cpu"
"$py" -c 'import torch; print(torch.__version__)' > "$out/torch_version"
"$py" -c 'import os; os.environ["TF_CPP_MIN_LOG_LEVEL"]="3"; import tensorflow as tf; print(tf.__version__)' \
  2>/dev/null > "$out/tf_version"
{ date -u '+%F %H:%M UTC'; uptime; } > "$out/load_before"
echo "bench: $(tail -1 "$out/load_before")" >&2
for r in $(seq 1 "$rounds"); do
  for t in 1 2; do
    if [ $((r % 2)) -eq 1 ]; then
      single_syncfac "$t" "$r"; single_torch "$t" "$r" nchw; single_torch "$t" "$r" nhwc
    else
      single_torch "$t" "$r" nhwc; single_torch "$t" "$r" nchw; single_syncfac "$t" "$r"
    fi
    echo "round $r threads $t: syncfac $(field "$out/single_syncfac_t${t}_r$r.json" examples_per_s) ex/s |" \
         "torch eager $(field "$out/single_torch_nchw_t${t}_r$r.json" examples_per_s)," \
         "channels-last $(field "$out/single_torch_nhwc_t${t}_r$r.json" examples_per_s)"
  done
  if [ $((r % 2)) -eq 1 ]; then cluster_syncfac "$r"; cluster_tf "$r"; else cluster_tf "$r"; cluster_syncfac "$r"; fi
  echo "round $r cluster: syncfac $(field "$out/cluster_syncfac_r$r.json" examples_per_s) ex/s |" \
       "TF SyncReplicas $(field "$out/cluster_tf_r$r.json" global_steps_per_s) global steps/s"
done
{ date -u '+%F %H:%M UTC'; uptime; } > "$out/load_after"

mkdir -p bench/results
rm -rf bench/results/peers && cp -r "$out" bench/results/peers   # every run's summary and log
python3 bench/peers/report.py "$out" "$rounds" bench/results/peers.json
