#!/usr/bin/env bash
# A cluster across network namespaces: chief, a worker and two PS shards,
# each in its own namespace with its own address on a bridge (veth pairs),
# as four hosts would be. Training must finish and end with bit-identical
# parameters to the same run in one process (one worker without initial
# tokens: the protocol is deterministic then). Needs root (scripts/test.sh
# runs as root) and `ip netns` (iproute2, from scripts/install-deps.sh);
# fails, saying which, without them.
#
#   tests/examples/netns_cluster.sh BUILD/bin
set -euo pipefail

bin=${1:?usage: netns_cluster.sh BUILD_BIN_DIR}
missing() { echo "FAILED: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || missing "needs root for network namespaces (scripts/test.sh runs as root)"
command -v ip >/dev/null || missing "iproute2's ip is missing (scripts/install-deps.sh installs it)"

tag="sf$$"
hub="${tag}hub"
roles=(chief:0 worker:0 ps:0 ps:1)
work=$(mktemp -d)
cleanup() {
  for i in "${!roles[@]}"; do ip netns del "${tag}n$i" 2>/dev/null || true; done
  ip netns del "$hub" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$hub" 2>/dev/null || missing "cannot create network namespaces here"
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
for i in "${!roles[@]}"; do
  ns="${tag}n$i"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$hub" link add "h$i" type veth peer name eth0 netns "$ns"
  ip -n "$hub" link set "h$i" master br0
  ip -n "$hub" link set "h$i" up
  ip -n "$ns" addr add "10.213.0.$((10 + i))/24" dev eth0
  ip -n "$ns" link set eth0 up
done

addr() { echo "\"10.213.0.$((10 + $1)):47100\""; }
cat > "$work/cluster.json" <<JSON
{"cluster": {"chief": [$(addr 0)], "worker": [$(addr 1)],
             "ps": [$(addr 2), $(addr 3)]}}
JSON

flags=(--fake_data --fake_train_size 2048 --fake_test_size 500
       --batch_size 32 --threads 1 --seed 3 --no_progress --steps 30
       --connect_timeout_ms 60000 --max_wait_ms 60000 --num_tokens 0)
pids=()
for i in "${!roles[@]}"; do
  job=${roles[$i]%%:*}
  task=${roles[$i]##*:}
  extra=()
  [ "$job" = chief ] && extra=(--summary "$work/summary.json")
  ip netns exec "${tag}n$i" "$bin/convnet_mnist_distributed" \
    --cluster "$work/cluster.json" --job_name "$job" --task "$task" \
    "${flags[@]}" "${extra[@]}" > "$work/$job-$task.log" 2>&1 &
  pids+=($!)
done

status=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "FAIL: ${roles[$i]} exited non-zero:"
    sed "s/^/  [${roles[$i]}] /" "$work/${roles[$i]/:/-}.log"
    status=1
  fi
done
[ $status -eq 0 ] || exit 1
sed 's/^/  [chief:0] /' "$work/chief-0.log" | tail -5

digest() { grep -o '"params_digest": "[0-9a-f]*"' "$1" | cut -d'"' -f4; }
"$bin/convnet_mnist_single" --fake_data --fake_train_size 2048 \
  --fake_test_size 500 --batch_size 32 --threads 1 --seed 3 --no_progress \
  --steps 30 --ps_tasks 2 --num_tokens 0 \
  --summary "$work/local.json" > "$work/local.log" 2>&1
across=$(digest "$work/summary.json")
local_=$(digest "$work/local.json")
echo "parameters across namespaces: $across, in one process: $local_"
[ -n "$across" ] && [ "$across" = "$local_" ] || { echo "FAIL: digests differ"; exit 1; }
echo "PASS: 4 namespaces, training finished, parameters equal"
