#!/usr/bin/env bash
# Where a node listens, and plaintext only on loopback (docs/tls.md, "Where
# a node listens"). Two network namespaces joined by a veth pair stand for
# this host (10.214.0.1) and another host on its network (10.214.0.2):
#
#  1. a cluster whose file names localhost:PORT for every task runs in the
#     first: ss shows each port bound to 127.0.0.1 only, each node logs
#     "listening on 127.0.0.1:PORT (cluster entry localhost:PORT)", a
#     connection to 127.0.0.1:PORT is accepted there and one from the other
#     host to 10.214.0.1:PORT is refused;
#  2. the same cluster with --bind 0.0.0.0 and no --tls_dir is refused at
#     start, naming 0.0.0.0 and --insecure;
#  3. with --bind 0.0.0.0 --insecure: ss shows the ports on every
#     interface, the other host's connection is accepted (the check of 1
#     can fail), and each node warns once;
#  4. a cluster file naming 10.214.0.x hosts without --tls_dir is refused
#     by every program (training node and evaluator), naming the hosts.
#
# Each running cluster ends by SIGTERM to every node (exit 143, the
# preemption path). Needs root (scripts/test.sh runs as root), `ip netns`
# and `ss` (iproute2, from scripts/install-deps.sh); fails without them.
#
#   tests/examples/listen_address.sh BUILD/bin
set -euo pipefail

bin=${1:?usage: listen_address.sh BUILD_BIN_DIR}
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root for network namespaces (scripts/test.sh runs as root)"
command -v ip >/dev/null || fail "iproute2's ip is missing (scripts/install-deps.sh installs it)"
command -v ss >/dev/null || fail "iproute2's ss is missing (scripts/install-deps.sh installs it)"

tag="sfla$$"
here="${tag}a"
other="${tag}b"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  ip netns del "$here" 2>/dev/null || true
  ip netns del "$other" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$here" 2>/dev/null || fail "cannot create network namespaces here"
ip netns add "$other"
for ns in "$here" "$other"; do ip -n "$ns" link set lo up; done
ip -n "$here" link add eth0 type veth peer name eth0 netns "$other"
ip -n "$here" addr add 10.214.0.1/24 dev eth0
ip -n "$other" addr add 10.214.0.2/24 dev eth0
ip -n "$here" link set eth0 up
ip -n "$other" link set eth0 up

roles=(chief:0 worker:0 ps:0)
ports=(47201 47202 47203)
cat > "$work/loopback.json" <<JSON
{"cluster": {"chief": ["localhost:47201"], "worker": ["localhost:47202"],
             "ps": ["localhost:47203"]}}
JSON
flags=(--fake_data --fake_train_size 512 --fake_test_size 100
       --batch_size 32 --threads 1 --seed 3 --no_progress --steps 1000000
       --connect_timeout_ms 120000 --max_wait_ms 120000)

# start NAME EXTRA...: every task of loopback.json in $here, logs in
# $work/NAME-JOB-TASK.log.
start() {
  local name=$1; shift
  pids=()
  for r in "${roles[@]}"; do
    ip netns exec "$here" "$bin/convnet_mnist_distributed" \
      --cluster "$work/loopback.json" --job_name "${r%%:*}" --task "${r##*:}" \
      "${flags[@]}" "$@" > "$work/$name-${r/:/-}.log" 2>&1 &
    pids+=($!)
  done
}

# listening PORT: the local address ss shows for PORT in $here (empty when
# nothing listens there).
listening() {
  ip netns exec "$here" ss -ltnH "sport = :$1" | awk '{print $4}' | head -1
}

# wait_listening: until every port listens (120 s at most).
wait_listening() {
  local deadline=$((SECONDS + 120))
  for p in "${ports[@]}"; do
    until [ -n "$(listening "$p")" ]; do
      [ $SECONDS -lt $deadline ] \
        || { tail -n 5 "$work"/*.log; fail "port $p not listening after 120 s"; }
      sleep 0.2
    done
  done
}

# reaches NS HOST PORT: a TCP connection from NS to HOST:PORT is accepted.
reaches() {
  ip netns exec "$1" timeout 10 bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null
}

# stop NAME: SIGTERM to every node; each must exit 143 (preempted).
stop() {
  local name=$1 i status
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for i in "${!pids[@]}"; do
    status=0
    wait "${pids[$i]}" || status=$?
    [ $status -eq 143 ] || {
      cat "$work/$name-${roles[$i]/:/-}.log"
      fail "$name: ${roles[$i]} exited $status after SIGTERM, not 143"
    }
  done
  pids=()
}

# -- 1. localhost entries: loopback only ------------------------------------
start loopback
wait_listening
for i in "${!ports[@]}"; do
  p=${ports[$i]}
  local_addr=$(listening "$p")
  echo "loopback cluster: ${roles[$i]} listens on $local_addr"
  [ "$local_addr" = "127.0.0.1:$p" ] \
    || fail "${roles[$i]} listens on $local_addr, not 127.0.0.1:$p"
  reaches "$here" 127.0.0.1 "$p" || fail "127.0.0.1:$p refuses on its own host"
  if reaches "$other" 10.214.0.1 "$p"; then
    fail "the other host reached ${roles[$i]} at 10.214.0.1:$p"
  fi
  log="$work/loopback-${roles[$i]/:/-}.log"
  grep -q "listening on 127.0.0.1:$p (cluster entry localhost:$p)" "$log" \
    || { cat "$log"; fail "${roles[$i]} did not log the address it bound"; }
  if grep -q -- "--insecure" "$log"; then
    fail "${roles[$i]} warned of plaintext on a loopback cluster"
  fi
done
stop loopback
echo "PASS: localhost entries listen on 127.0.0.1 only; 10.214.0.2 is refused"

# -- 2. --bind 0.0.0.0 without TLS: refused -----------------------------------
status=0
ip netns exec "$here" "$bin/convnet_mnist_distributed" \
  --cluster "$work/loopback.json" --job_name chief --task 0 "${flags[@]}" \
  --bind 0.0.0.0 > "$work/refused.log" 2>&1 || status=$?
[ $status -ne 0 ] || fail "--bind 0.0.0.0 without --tls_dir was accepted"
grep -q "0.0.0.0" "$work/refused.log" && grep -q -- "--insecure" "$work/refused.log" \
  && grep -q -- "--tls_dir" "$work/refused.log" \
  || { cat "$work/refused.log"; fail "the refusal does not name 0.0.0.0, --tls_dir and --insecure"; }
[ -z "$(listening 47201)" ] || fail "a refused node listens"
echo "PASS: --bind 0.0.0.0 without TLS refused: $(tail -1 "$work/refused.log")"

# -- 3. --bind 0.0.0.0 --insecure: every interface, warned once --------------
start wildcard --bind 0.0.0.0 --insecure
wait_listening
for i in "${!ports[@]}"; do
  p=${ports[$i]}
  local_addr=$(listening "$p")
  echo "--bind 0.0.0.0: ${roles[$i]} listens on $local_addr"
  case "$local_addr" in
    "0.0.0.0:$p" | "*:$p" | "[::]:$p") ;;
    *) fail "${roles[$i]} listens on $local_addr with --bind 0.0.0.0" ;;
  esac
  reaches "$other" 10.214.0.1 "$p" \
    || fail "the other host cannot reach ${roles[$i]} at 10.214.0.1:$p with --bind 0.0.0.0"
  log="$work/wildcard-${roles[$i]/:/-}.log"
  grep -q "listening on 0.0.0.0:$p (cluster entry localhost:$p)" "$log" \
    || { cat "$log"; fail "${roles[$i]} did not log 0.0.0.0:$p"; }
  n=$(grep -c "warning: --insecure" "$log" || true)
  [ "$n" -eq 1 ] || { cat "$log"; fail "${roles[$i]} warned $n times of --insecure, not once"; }
done
stop wildcard
echo "PASS: --bind 0.0.0.0 --insecure listens everywhere, reached from 10.214.0.2, warned once per node"

# -- 4. hosts off loopback without TLS: refused, naming them ------------------
cat > "$work/network.json" <<JSON
{"cluster": {"chief": ["10.214.0.1:47201"], "worker": ["10.214.0.2:47202"],
             "ps": ["localhost:47203"]}}
JSON
for program in convnet_mnist_distributed syncfac_evaluator; do
  status=0
  if [ $program = syncfac_evaluator ]; then
    args=(--job_name evaluator --task 0 --fake_data)
  else
    args=(--job_name worker --task 0 "${flags[@]}")
  fi
  ip netns exec "$here" "$bin/$program" --cluster "$work/network.json" \
    "${args[@]}" > "$work/$program-refused.log" 2>&1 || status=$?
  [ $status -ne 0 ] || fail "$program ran in plaintext across 10.214.0.x"
  grep -q "10.214.0.1, 10.214.0.2" "$work/$program-refused.log" \
    && ! grep -q "10.214.0.2, localhost\|, localhost)" "$work/$program-refused.log" \
    || { cat "$work/$program-refused.log"; fail "$program's refusal does not name exactly the hosts off loopback"; }
  echo "PASS: $program refused: $(grep -m1 "10.214" "$work/$program-refused.log")"
done
echo "PASS: nodes listen where they were told; no plaintext beyond loopback without --insecure"
